"""The trainer service: rollouts -> episodes -> rewards -> TRL GRPO steps -> weight sync -> archive."""
