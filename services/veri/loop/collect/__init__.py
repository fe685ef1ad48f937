"""Running harness rollouts through the stack: a group's proxy sessions and sandboxes -> rollout records
(`collect`), and who runs the sandboxes (`runner`). The trainer, `veri eval` and `veri run-harness` share
it; it imports no trainer, eval or CLI code."""
