"""Harbor tasks: `veri tasks check PATH...` (what veri can run, what it refuses, what test.sh cannot get
offline). The task format itself (task.toml's schema, reading, refusals) lives in `veri.core.harbor_task`."""
