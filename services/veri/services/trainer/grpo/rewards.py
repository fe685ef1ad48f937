"""The reward functions TRL calls: one per job reward function, returning what veri already scored.

veri scores each rollout itself (`rewards.scoring.RewardScorer`: per-call timeouts, verdicts, the trajectory
and output folder as inputs) inside the rollout function; the values reach TRL through the
`veri_rewards` extra field (`rows.REWARDS_FIELD`). Handing TRL one function per job function, with
the job's weights as `reward_weights`, keeps TRL's per-function metrics (`rewards/<name>/mean`) and
makes its weighted `nansum` equal veri's reward (a function's None is skipped by both).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from veri.loop.rewards import RewardFunction
from veri.services.trainer.grpo.rows import REWARDS_FIELD


def scored_reward(name: str) -> Callable[..., list[float | None]]:
    def reward(**kwargs: Any) -> list[float | None]:
        return [values[name] for values in kwargs[REWARDS_FIELD]]

    reward.__name__ = name
    return reward


def trl_reward_funcs(functions: list[RewardFunction]) -> tuple[list[Callable[..., list[float | None]]], list[float]]:
    """(reward_funcs for GRPOTrainer, reward_weights for GRPOConfig)."""
    return [scored_reward(f.name) for f in functions], [f.weight for f in functions]
