"""`veri eval`'s statistics against hand-computed values."""

from __future__ import annotations

import math

import pytest

from veri.loop.evals.stats import bootstrap_ci, mean_pass_at_k, paired_test, pass_at_k


def test_pass_at_k_is_the_unbiased_estimator():
    assert pass_at_k(4, 0, 1) == 0.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(5, 2, 3) == pytest.approx(1 - 1 / 10)  # 1 - C(3,3)/C(5,3)
    assert pass_at_k(4, 3, 2) == 1.0  # fewer failures than k: every draw holds a pass
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)  # pass@1 is the pass rate
    assert mean_pass_at_k([(2, 1), (2, 0)], 2) == pytest.approx(0.5)
    assert mean_pass_at_k([(1, 1)], 2) is None  # no task has k samples
    with pytest.raises(ValueError):
        pass_at_k(2, 3, 1)


def test_bootstrap_interval_holds_the_mean_and_is_seeded():
    per_task = [[1.0, 0.0, 1.0], [0.0, 0.0], [1.0], [0.5, 0.5, 1.0]]
    mean = sum(map(sum, per_task)) / sum(map(len, per_task))
    low, high = bootstrap_ci(per_task)
    assert low < mean < high and 0.0 <= low and high <= 1.0
    assert bootstrap_ci(per_task) == (low, high)  # fixed seed: the same eval, the same interval
    assert bootstrap_ci([[0.7, 0.7], [0.7]]) == (pytest.approx(0.7), pytest.approx(0.7))


def test_paired_test_finds_a_shift_and_not_noise():
    a = {task: 0.2 for task in range(12)}
    better = {task: 0.8 for task in range(12)}
    shifted = paired_test(a, better)
    assert shifted.tasks == 12 and shifted.difference == pytest.approx(0.6)
    assert shifted.p_value == pytest.approx(2 / 2**12)  # exact: only the all-same-sign splits are as extreme
    assert shifted.ci[0] > 0
    same = paired_test(a, {task: 0.2 + (0.1 if task % 2 else -0.1) for task in range(12)})
    assert same.p_value > 0.5 and same.ci[0] < 0 < same.ci[1]
    many = paired_test({t: 0.0 for t in range(40)}, {t: 1.0 for t in range(40)})  # Monte Carlo p-value
    assert many.p_value < 0.001
    only_shared = paired_test({0: 0.0, 1: 1.0}, {1: 0.0, 2: 1.0})
    assert only_shared.tasks == 1 and math.isclose(only_shared.difference, -1.0)
    with pytest.raises(ValueError, match="share no scored task"):
        paired_test({0: 1.0}, {1: 1.0})
