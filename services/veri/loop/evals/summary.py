"""An eval's results from its rollout records: per reward function the mean with a bootstrap 95 %
interval, pass@1 and pass@k, and a per-task table; what `--json` prints and eval.json keeps.

A sample *passes* a function when its value is at least `pass_threshold` (default 1.0: an exact-match
reward's 1). The figures are keyed like the training metrics: "reward" is the job's weighted total, as
the trainer sums it, and "reward_fn/<name>" each function's own value (so a function named `reward`,
the default name, is not hidden behind the total). A rollout a rule rejected
(the harness failed, no spans, ...) has no reward: it is left out of every figure and counted in
`rejected`, by the first rule that rejected it.

On a Harbor dataset `verifier` adds the tests' own figures per task (`verifier_table`), read from each
record's verifier result whatever the job's reward functions are: pass@k on the verifier's `reward`, and
its mean two ways, over the rollouts whose tests gave a reward (`mean`) and with a verifier that could not
run counted as 0 (`mean_failed_as_0`): Harbor's pass rate is the mean of `reward` over a task's trials.
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

from veri.core.rollout_record import REWARD_FN_PREFIX, RolloutRecord
from veri.core.rules import Effect
from veri.loop.evals.stats import bootstrap_ci, mean_pass_at_k, paired_test

TOTAL = "reward"  # the weighted sum of the job's functions


def label(key: str) -> str:
    """How the terminal tables name a figure: "total", or the function's own name."""
    return "total" if key == TOTAL else key.removeprefix(REWARD_FN_PREFIX)


def summarize(records: list[RolloutRecord], functions: list[str], *, k: int, pass_threshold: float) -> dict[str, Any]:
    names = [TOTAL, *(REWARD_FN_PREFIX + name for name in functions)]
    by_task: dict[int, list[RolloutRecord]] = {}
    for record in sorted(records, key=lambda r: (r.task_index, r.rollout_index)):
        by_task.setdefault(record.task_index, []).append(record)
    values = {name: {task: [v for r in group if (v := _value(r, name)) is not None] for task, group in by_task.items()}
              for name in names}
    rejected = Counter(_rejected_by(r) for r in records if r.reward is None)
    summary: dict[str, Any] = {
        "functions": names, "k": k, "pass_threshold": pass_threshold,
        "rollouts": len(records), "scored": sum(r.reward is not None and r.reward.reward is not None for r in records),
        "rejected": dict(sorted(rejected.items())),
        "reward_mean": {}, "reward_ci": {}, "pass_at_1": {}, "pass_at_k": {},
    }
    for name in names:
        per_task = [vals for vals in values[name].values() if vals]
        counts = [(len(vals), sum(v >= pass_threshold for v in vals)) for vals in per_task]
        every = [v for vals in per_task for v in vals]
        summary["reward_mean"][name] = statistics.fmean(every) if every else None
        summary["reward_ci"][name] = list(bootstrap_ci(per_task)) if every else None
        summary["pass_at_1"][name] = mean_pass_at_k(counts, 1)
        summary["pass_at_k"][name] = {str(size): mean_pass_at_k(counts, size) for size in sorted({1, k})}
    if (verifier := verifier_table(records, k=k, pass_threshold=pass_threshold)) is not None:
        summary["verifier"] = verifier
    summary["tasks"] = [
        {"task_index": task, "samples": len(group), "scored": len(values[TOTAL][task]),
         "mean": {name: statistics.fmean(values[name][task]) if values[name][task] else None for name in names},
         "passed": {name: sum(v >= pass_threshold for v in values[name][task]) for name in names}}
        for task, group in by_task.items()
    ]
    return summary


def verifier_table(records: list[RolloutRecord], *, k: int, pass_threshold: float) -> dict[str, Any] | None:
    """The tests' figures per task and overall (None: no record has a verifier, not a Harbor dataset)."""
    tasks: dict[int, list[RolloutRecord]] = {}
    for record in sorted(records, key=lambda r: (r.task_index, r.rollout_index)):
        if record.verifier is not None:
            tasks.setdefault(record.task_index, []).append(record)
    if not tasks:
        return None
    rows = []
    for task, group in tasks.items():
        rewards = [v.reward for r in group if (v := r.verifier) is not None and v.ran and v.reward is not None]
        failed = Counter(str(v.error) for r in group if (v := r.verifier) is not None and not v.ran)
        passed = sum(reward >= pass_threshold for reward in rewards)
        rows.append({
            "task_index": task, "task_name": group[0].task.get("task_name"), "samples": len(group),
            "verified": len(rewards), "failed": dict(sorted(failed.items())),
            "mean": statistics.fmean(rewards) if rewards else None,
            "mean_failed_as_0": sum(rewards) / len(group), "passed": passed,
            "pass_at_k": {str(size): mean_pass_at_k([(len(rewards), passed)], size) for size in sorted({1, k})},
        })
    verified = [row for row in rows if row["verified"]]
    counts = [(row["verified"], row["passed"]) for row in verified]
    failed_total: Counter[str] = Counter()
    for row in rows:
        failed_total.update(row["failed"])
    return {
        "rollouts": sum(row["samples"] for row in rows), "verified": sum(row["verified"] for row in rows),
        "failed": dict(sorted(failed_total.items())),
        "mean": statistics.fmean(row["mean"] for row in verified) if verified else None,
        "mean_failed_as_0": statistics.fmean(row["mean_failed_as_0"] for row in rows),
        "pass_at_k": {str(size): mean_pass_at_k(counts, size) for size in sorted({1, k})},
        "tasks": rows,
    }


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """B against A, per function both have, over the tasks both scored (a paired test on per-task means)."""
    shared = [name for name in a["functions"] if name in b["functions"]]
    if not shared:
        raise ValueError("the two evals have no reward function in common")
    result: dict[str, Any] = {"a": a.get("name"), "b": b.get("name"), "functions": {}}
    for name in shared:
        means_a, means_b = _task_means(a, name), _task_means(b, name)
        test = paired_test(means_a, means_b)
        result["functions"][name] = {"tasks": test.tasks, "mean_a": test.mean_a, "mean_b": test.mean_b,
                                     "difference": test.difference, "difference_ci": list(test.ci),
                                     "p_value": test.p_value}
    return result


def _task_means(summary: dict[str, Any], name: str) -> dict[int, float]:
    return {row["task_index"]: row["mean"][name] for row in summary["tasks"] if row["mean"].get(name) is not None}


def _rejected_by(record: RolloutRecord) -> str:
    """The first rule that rejected the rollout (a crashed harness is also one with no spans, say)."""
    rules = [v.rule.value for v in record.episode.verdicts if v.effect == Effect.REJECT]
    return rules[0] if rules else "not_scored"


def _value(record: RolloutRecord, name: str) -> float | None:
    if record.reward is None or record.reward.reward is None:
        return None
    if name == TOTAL:
        return record.reward.reward
    return record.reward.per_function.get(name.removeprefix(REWARD_FN_PREFIX))
