"""Reward functions: what they are called with (`functions`), loading them (`loading`), scoring
rollouts with them (`scoring`)."""

from veri.trainer.rewards.functions import RewardFunction, RewardInputs
from veri.trainer.rewards.loading import check_reward_functions, load_reward_functions
from veri.trainer.rewards.scoring import RewardScorer

__all__ = ["RewardFunction", "RewardInputs", "RewardScorer", "check_reward_functions", "load_reward_functions"]
