"""Dataset rows as TRL sees them, and TRL's batch back as GRPO groups.

TRL's `rollout_func` gets only the batch's prompts, so the dataset TRL iterates holds one *task key*
per row (`veri-task:<index>`) instead of the prompt itself; the rollout function maps each key back
to the full row (the harness gets the whole row as VERI_TASK). TRL 1.16's RepeatSampler hands every
key `num_generations` times in a row, and expects one completion per entry in that order (rewards
and advantages are computed over `view(-1, num_generations)`), so a run of equal keys is one group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from datasets import Dataset

KEY_PREFIX = "veri-task:"


def task_key(index: int) -> str:
    return f"{KEY_PREFIX}{index}"


def task_index(key: Any) -> int:
    if not isinstance(key, str) or not key.startswith(KEY_PREFIX):
        raise ValueError(f"{key!r} is not a veri task key: train on the dataset `trl_dataset` builds")
    return int(key.removeprefix(KEY_PREFIX))


def trl_dataset(rows: list[dict[str, Any]]) -> Dataset:
    """One task key per dataset row, in the dataset's order."""
    return Dataset.from_dict({"prompt": [task_key(index) for index in range(len(rows))]})


@dataclass(frozen=True)
class TaskGroup:
    task_index: int
    size: int
    first_rollout_index: int  # > 0 when the same task appears twice in one batch


def task_groups(prompts: list[Any], group_size: int) -> list[TaskGroup]:
    """The batch's GRPO groups, in order: each run of `group_size` equal task keys."""
    if len(prompts) % group_size:
        raise ValueError(f"TRL passed {len(prompts)} prompts, not a multiple of num_generations={group_size}")
    groups: list[TaskGroup] = []
    seen: dict[int, int] = {}
    for start in range(0, len(prompts), group_size):
        indices = {task_index(key) for key in prompts[start : start + group_size]}
        if len(indices) != 1:
            raise ValueError(f"TRL's batch mixes tasks {sorted(indices)} within one group of {group_size}")
        index = indices.pop()
        groups.append(TaskGroup(index, group_size, seen.get(index, 0)))
        seen[index] = seen.get(index, 0) + group_size
    return groups
