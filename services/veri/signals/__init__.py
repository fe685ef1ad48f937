"""Reward-hacking signals, computed from a job's archive step by step (detect.py); the console's job
page shows them with the rollouts that raised them. Thresholds: the job's `signals:` (core/signals.py)."""
