"""What a person watching `veri train` sees: one line and metrics per step (`progress`), rich bars
(`bars`), and a clean stop on Ctrl-C / SIGTERM (`interrupt`)."""
