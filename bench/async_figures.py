"""The figures that compare a job at max_staleness 0 with the same job asynchronously, from its
metrics lines, and the line both comparisons end with (bench/async_step.py on CPU, bench/gpu_check.sh
on a GPU box):

    async/sync step time: R (max_staleness 1; staleness max S; reward sync A async B; policy busy P0 -> P1;
    dropped D%)

D is the share of the asynchronous job's rollouts that were sampled and dropped as stale (never trained).

bench/async_step.py runs the two arms in interleaved rounds: `pool` folds an arm's rounds into one set of
figures, `round_ratios` / `spread` say how the rounds' async/sync ratios scatter, and `verdict` checks
them against the targets (docs/benchmarks.md). Pure functions: the bench's arithmetic, unit-tested.
"""

from __future__ import annotations

import statistics
from typing import Any

UTILISATION = "utilisation/policy_"
# What asynchronous training has to show to pay (docs/async-training.md): the median round's step-time
# ratio, the worst round's, and the share of sampled rollouts thrown away as stale.
TARGET_MEDIAN = 0.6
TARGET_ROUND = 0.8
TARGET_DROPPED = 0.02


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
        "rollouts": sum(m.get("rollouts", 0) + m.get("rollouts/stale_dropped", 0) for m in metrics),
    }


def dropped_fraction(figures: dict[str, float]) -> float:
    """Rollouts dropped as stale over every rollout the job's steps took (trained or dropped)."""
    return figures["dropped"] / figures["rollouts"] if figures.get("rollouts") else 0.0


def comparison_line(sync: dict[str, float], one: dict[str, float], ratio: float | None = None) -> str:
    """`ratio`: the step-time ratio to print (bench/async_step.py: the median of its rounds' ratios);
    by default the two jobs' step times'."""
    ratio = one["step_s"] / sync["step_s"] if ratio is None else ratio
    return (f"async/sync step time: {ratio:.2f} (max_staleness 1; staleness max"
            f" {one['staleness_max']:.0f}; reward sync {sync['reward']:.3f} async {one['reward']:.3f}; policy busy"
            f" {sync['policy_busy']:.0%} -> {one['policy_busy']:.0%}; dropped {dropped_fraction(one):.0%})")


def pool(figures: list[dict[str, float]]) -> dict[str, float]:
    """One arm over its rounds: the means of the runs' step time, reward and policy busy, the max of
    their staleness max, the sums of their rollouts and dropped rollouts."""
    if not figures:
        raise ValueError("pool needs at least one run's figures")
    return {"step_s": statistics.mean(f["step_s"] for f in figures),
            "staleness_max": max(f["staleness_max"] for f in figures),
            "reward": statistics.mean(f["reward"] for f in figures),
            "policy_busy": statistics.mean(f["policy_busy"] for f in figures),
            "dropped": sum(f["dropped"] for f in figures), "rollouts": sum(f["rollouts"] for f in figures)}


def round_ratios(arm: list[dict[str, float]], sync: list[dict[str, float]]) -> list[float]:
    """Each round's step time of `arm` over the synchronous run of the same round."""
    if len(arm) != len(sync):
        raise ValueError(f"{len(arm)} asynchronous runs against {len(sync)} synchronous: a round is missing")
    return [one["step_s"] / zero["step_s"] for one, zero in zip(arm, sync, strict=True)]


def spread(ratios: list[float]) -> str:
    """The rounds' ratios, each, then their median and min-max."""
    return (f"rounds {', '.join(f'{ratio:.2f}' for ratio in ratios)}; median {statistics.median(ratios):.2f},"
            f" min-max {min(ratios):.2f}-{max(ratios):.2f}")


def verdict(ratios: list[float], dropped: float) -> str:
    """The targets, each met or missed: median ratio, every round's ratio, dropped fraction."""
    checks = [(f"median <= {TARGET_MEDIAN}", statistics.median(ratios) <= TARGET_MEDIAN),
              (f"every round <= {TARGET_ROUND}", max(ratios) <= TARGET_ROUND),
              (f"dropped <= {TARGET_DROPPED:.0%}", dropped <= TARGET_DROPPED)]
    missed = [name for name, ok in checks if not ok]
    return ("targets: " + ", ".join(name for name, _ in checks)
            + (": met" if not missed else f": missed ({', '.join(missed)})"))
