"""The figures that compare a job at max_staleness 0 with the same job asynchronously, from its
metrics lines, and the line both comparisons end with (bench/async_step.py on CPU, bench/gpu_check.sh
on a GPU box):

    async/sync step time: R (max_staleness 1; staleness max S; reward sync A async B; policy busy P0 -> P1)
"""

from __future__ import annotations

import statistics
from typing import Any

UTILISATION = "utilisation/policy_"


def job_figures(metrics: list[dict[str, Any]]) -> dict[str, float]:
    """Step time is the mean over the steps after the first (the first pays start-up, and under async it
    has nothing sampled ahead); policy busy is the steps' mean of the replicas' `utilisation/policy_<r>`
    (the fraction of the step each had a request in flight, from the step timeline)."""
    measured = metrics[1:] or metrics
    busy = [value for line in metrics for key, value in line.items() if key.startswith(UTILISATION)]
    return {
        "step_s": statistics.mean(m["time/step_s"] for m in measured),
        "staleness_max": max(m.get("staleness/max", 0) for m in metrics),
        "reward": statistics.mean(m.get("reward/mean", 0.0) for m in metrics),
        "policy_busy": statistics.mean(busy) if busy else 0.0,
        "dropped": sum(m.get("rollouts/stale_dropped", 0) for m in metrics),
    }


def comparison_line(sync: dict[str, float], one: dict[str, float]) -> str:
    return (f"async/sync step time: {one['step_s'] / sync['step_s']:.2f} (max_staleness 1; staleness max"
            f" {one['staleness_max']:.0f}; reward sync {sync['reward']:.3f} async {one['reward']:.3f}; policy busy"
            f" {sync['policy_busy']:.0%} -> {one['policy_busy']:.0%})")
