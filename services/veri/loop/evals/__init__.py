"""`veri eval`: a checkpoint's held-out results through the job's own stack, no training.

    cli.py          the command (`veri eval CONFIG ...`, `--compare A B`)
    checkpoints.py  which weights (--model, --job --step K|final|base) and loading them into the policy
    run.py          the eval: tasks, the collector and scorer the trainer uses, the eval archive
    summary.py      eval.json's figures per reward function and per task; two evals compared
    stats.py        pass@k, the bootstrap interval, the paired test
    report.py       what the terminal shows
"""
