"""The trainer's part of checking a job (`veri validate`, `veri train`): core checks the schema and
calls these through its `TrainerChecks` hook, so every problem is still reported at once.

    rewards      the reward functions load and their signatures fit the dataset (rewards.loading)
    grpo         the `grpo:` section against the installed TRL (grpo.checks)
    unknown_key  a TRL setting written at the top level: move it under `grpo:` (grpo.checks)
"""

from __future__ import annotations

from veri.loop.rewards import check_reward_functions
from veri.services.trainer.grpo.trl_checks import check_grpo, unknown_top_level_key
from veri.validation.job_checks import TrainerChecks

TRAINER_CHECKS = TrainerChecks(rewards=check_reward_functions, grpo=check_grpo, unknown_key=unknown_top_level_key)
