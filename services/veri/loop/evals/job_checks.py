"""What `veri eval` checks of a job beyond its schema: the reward code loads and fits the dataset, as for
training. Not the `grpo:` section: an eval trains nothing, and checking it against TRL would load TRL
(seconds) before the first bad argument is answered."""

from __future__ import annotations

from veri.loop.rewards import check_reward_functions
from veri.validation.job_checks import TrainerChecks

EVAL_CHECKS = TrainerChecks(rewards=check_reward_functions, grpo=lambda config, valid: [], unknown_key=lambda key: None)
