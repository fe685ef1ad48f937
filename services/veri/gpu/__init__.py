"""The GPU plan: where the trainer and the vLLM policy run (planner.py), the memory that needs (memory.py),
the versions the vLLM stack runs together (pins.py, stack/), and a job's plan (job.py)."""
