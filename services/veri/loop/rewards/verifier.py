"""The built-in `verifier` reward: a Harbor task's tests are the reward, with no code in the job.

`rewards: [{builtin: verifier}]` (the default of a `harbor:` dataset with no `rewards:`) is one function,
`verifier`: reward.json's `reward`, else reward.txt's number. `keys: {correctness: 1.0, performance: 0.5}`
adds one function per reward.json key, `verifier/<key>`, weighted by its number (`weight` stays the weight
of `verifier` itself: set it to 0 to sum the keys alone). Each reads the `verifier` input every reward
function can ask for (`RewardInputs.verifier`).

A verifier that could not run (no reward file, timeout, error) gives None: that rollout already has the
verifier's rule (verifier_no_reward, verifier_timeout, verifier_error), which rejects it, never a 0. A
key the job weighs that reward.json lacks is a reward_error naming the keys it has.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from veri.core.config import VERIFIER_REWARD, RewardConfig
from veri.core.dataset import PROMPT
from veri.core.harbor_task import TASK_DIR_COLUMN
from veri.core.problems import Problem
from veri.loop.rewards.functions import RewardFunction


def verifier_functions(spec: RewardConfig) -> list[RewardFunction]:
    """`builtin: verifier`'s functions: `verifier`, then `verifier/<key>` per weighted key."""
    name = spec.name or VERIFIER_REWARD
    keys = spec.keys or {}
    functions = [RewardFunction.wrap(name, _total(bool(keys)), spec.weight)]
    functions += [RewardFunction.wrap(f"{name}/{key}", _key(key), weight) for key, weight in keys.items()]
    return functions


def verifier_problems(where: str, columns: list[str] | None) -> list[Problem]:
    """`builtin: verifier` needs a Harbor dataset (its rows name their task folder)."""
    if columns is None or TASK_DIR_COLUMN in columns:
        return []
    shown = sorted(c for c in columns if c != PROMPT)
    return [Problem(f"{where}.builtin", f"the verifier reward scores Harbor tasks, but the dataset's rows are not"
                    f" tasks (columns {shown}, no {TASK_DIR_COLUMN!r})",
                    "set `dataset: {harbor: DIR}` (docs/harbor-tasks.md), or use a reward `file:` for a JSONL dataset")]


def _total(keyed: bool) -> Callable[..., Any]:
    def verifier_reward(verifier: list[dict[str, float] | None]) -> float | None:
        scores = verifier[0]
        if scores is None:
            return None  # the verifier could not run: its rule already rejected the rollout
        if "reward" not in scores and not keyed:
            raise ValueError(f"the verifier wrote no `reward` (reward.json has {sorted(scores)}): weigh its keys"
                             " with `keys: {<key>: <weight>}` under `builtin: verifier`, or write `reward` too")
        return scores.get("reward")

    return verifier_reward


def _key(key: str) -> Callable[..., Any]:
    def verifier_key(verifier: list[dict[str, float] | None]) -> float | None:
        scores = verifier[0]
        if scores is None:
            return None
        if key not in scores:
            raise ValueError(f"reward.json has no key {key!r} (it has {sorted(scores)}): fix the task's test.sh,"
                             " or the job's `keys:`")
        return scores[key]

    return verifier_key
