"""Reward functions: what they are called with (`functions`), loading them (`loading`), scoring
rollouts with them (`scoring`). The trainer, `veri eval` and `veri replay` score with this package."""

from veri.loop.rewards.functions import RewardFunction, RewardInputs
from veri.loop.rewards.loading import check_reward_functions, load_reward_functions
from veri.loop.rewards.scoring import RewardScorer

__all__ = ["RewardFunction", "RewardInputs", "RewardScorer", "check_reward_functions", "load_reward_functions"]
