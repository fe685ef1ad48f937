"""The trainer service: tasks -> rollouts -> episodes -> rewards -> TRL GRPO steps -> weight sync -> archive.

The packages follow the data's way through one step:
    loop/collect/  a step's tasks as GRPO groups, each group's proxy sessions and sandboxes -> rollout records
    loop/rewards/   the job's reward functions: loaded, checked, called per rollout under a timeout
    grpo/      TRL: the job's GRPOConfig (and its checks), the GRPOTrainer, the rollout function, the rows it returns
    weights/   the trained weights pushed to the policy server after each step (policy version = step)
    archive/   every rollout record, per-step metrics and logs, by policy step; checkpoints and resume
    ui/        the per-step line and bars a person watches; Ctrl-C / SIGTERM stop it cleanly
    job.py     one job from start to end (`run_job`);  cli.py  `veri train`, `veri validate`
    checks.py  the trainer's part of checking a job (reward code, `grpo:` against TRL): core's hook
"""
