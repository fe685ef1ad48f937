"""Running a step's harness rollouts: tasks -> GRPO groups (`tasks`), a group's proxy sessions and
sandboxes -> rollout records (`collect`), and who runs the sandboxes (`runner`)."""
