"""One step's parts that the trainer, `veri eval` and `veri run-harness` share: collect/ (a group's proxy
sessions and sandboxes -> rollout records), rewards/ (the job's reward functions, under timeouts), evals/
(`veri eval`)."""
