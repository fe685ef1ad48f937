"""The trainer's view of rollouts: dataset rows as TRL's task keys and TRL's batch back as GRPO groups
(`tasks`). Running them is `veri.loop.collect`."""
