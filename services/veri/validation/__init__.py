"""A job file checked: every problem at once, each with its fix (run.py: load_config, check_config; the checks:
job_checks.py; what only the trainer can check comes through its hook, services/trainer/validation_hook.py)."""
