"""`make reliability`: fault scenarios run at full size, one summary table (bench/reliability/run.py)."""
