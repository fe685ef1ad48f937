"""The trainer service: tasks -> rollouts -> episodes -> rewards -> TRL GRPO steps -> weight sync -> archive.

Its packages follow the data's way through one step (what it shares with `veri eval` is in loop/:
collect/ runs the groups, rewards/ scores them; the records go to archive/):
    schedule/           which task each group runs; asynchronous training's producer of groups
    grpo/               TRL: the job's GRPOConfig (and its checks), the GRPOTrainer, the rollout function, the rows
    weights/            the trained weights pushed to the policy servers after each step (policy version = step)
    timeline/           the step timeline (timeline.jsonl) and the utilisation figures
    ui/                 the per-step line and bars a person watches; Ctrl-C / SIGTERM stop it cleanly
    job.py              one job from start to end (`run_job`);  cli.py  `veri train`, `veri validate`
    validation_hook.py  the trainer's part of checking a job (reward code, `grpo:` against TRL): validation's hook
"""
