"""The statistics `veri eval` reports: pass@k (the unbiased estimator), a task-level bootstrap interval
for the mean, and a paired test between two evals over the same tasks.

Samples of one task are not independent (same prompt), so the bootstrap resamples *tasks* (with all
their samples) and the paired test compares per-task means. Every random draw uses a fixed seed: the
same eval reports the same interval. Plain Python (no numpy/scipy): eval sizes are tasks, not tokens.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

SEED = 0
BOOTSTRAP_RESAMPLES = 2000
PERMUTATIONS = 10000  # sign flips drawn when there are too many tasks to enumerate every one
EXACT_PERMUTATION_TASKS = 14  # up to 2^14 sign patterns: enumerated, the p-value is exact


def pass_at_k(n: int, c: int, k: int) -> float:
    """The chance that at least one of k samples drawn without replacement from n (c of them passing)
    passes: 1 - C(n-c, k) / C(n, k) (Chen et al. 2021)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean_pass_at_k(counts: Sequence[tuple[int, int]], k: int) -> float | None:
    """pass@k averaged over tasks, each (n, c); tasks with fewer than k samples are left out (None: none left)."""
    values = [pass_at_k(n, c, k) for n, c in counts if n >= k]
    return statistics.fmean(values) if values else None


def bootstrap_ci(per_task: Sequence[Sequence[float]], *, level: float = 0.95,
                 resamples: int = BOOTSTRAP_RESAMPLES, seed: int = SEED) -> tuple[float, float]:
    """Percentile interval of the mean over all samples, resampling tasks with their samples."""
    groups = [list(values) for values in per_task if values]
    if not groups:
        raise ValueError("no scored samples to bootstrap")
    rng = random.Random(seed)
    means = []
    for _ in range(resamples):
        drawn = [groups[rng.randrange(len(groups))] for _ in groups]
        means.append(sum(map(sum, drawn)) / sum(map(len, drawn)))
    means.sort()
    tail = (1.0 - level) / 2
    return _quantile(means, tail), _quantile(means, 1.0 - tail)


@dataclass(frozen=True)
class PairedResult:
    tasks: int  # tasks scored in both
    mean_a: float
    mean_b: float
    difference: float  # mean over tasks of (B - A), per-task means
    ci: tuple[float, float]  # bootstrap 95 % interval of the difference
    p_value: float  # two-sided sign-flip permutation test of "no difference"


def paired_test(a: dict[int, float], b: dict[int, float], *, seed: int = SEED) -> PairedResult:
    """B against A over the tasks both scored (`a`, `b`: task -> that task's mean)."""
    shared = sorted(set(a) & set(b))
    if not shared:
        raise ValueError("the two evals share no scored task: compare evals of the same split")
    diffs = [b[task] - a[task] for task in shared]
    observed = abs(statistics.fmean(diffs))
    rng = random.Random(seed)
    if len(diffs) <= EXACT_PERMUTATION_TASKS:
        patterns = range(1 << len(diffs))
        flipped = [abs(sum(d if mask >> i & 1 else -d for i, d in enumerate(diffs))) / len(diffs) for mask in patterns]
    else:
        flipped = [abs(sum(d if rng.random() < 0.5 else -d for d in diffs)) / len(diffs) for _ in range(PERMUTATIONS)]
    # The observed split counts as one of the draws (exact enumeration includes it already).
    extreme = sum(value >= observed - 1e-12 for value in flipped)
    p_value = extreme / len(flipped) if len(diffs) <= EXACT_PERMUTATION_TASKS else (extreme + 1) / (len(flipped) + 1)
    return PairedResult(tasks=len(shared), mean_a=statistics.fmean(a[t] for t in shared),
                        mean_b=statistics.fmean(b[t] for t in shared), difference=statistics.fmean(diffs),
                        ci=bootstrap_ci([[d] for d in diffs], seed=seed), p_value=min(1.0, p_value))


def _quantile(ordered: list[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default)."""
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
