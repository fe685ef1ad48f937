"""bench/async_step.py's arithmetic (bench/async_figures.py): an arm's rounds pooled, the rounds' ratios
and their spread, the targets, and the line the comparison ends with."""

from __future__ import annotations

import pytest

from bench.async_figures import comparison_line, dropped_fraction, job_figures, pool, round_ratios, spread, verdict


def run(step_s: float, reward: float, dropped: int = 0, rollouts: int = 80, staleness_max: int = 0,
        busy: float = 0.1) -> dict[str, float]:
    return {"step_s": step_s, "staleness_max": staleness_max, "reward": reward, "policy_busy": busy,
            "dropped": dropped, "rollouts": rollouts}


SYNC = [run(6.0, 0.60), run(8.0, 0.70), run(5.0, 0.65)]
ASYNC = [run(3.0, 0.62, dropped=1, rollouts=81, staleness_max=1, busy=0.2),
         run(6.0, 0.66, rollouts=80, staleness_max=1, busy=0.3),
         run(2.0, 0.70, dropped=2, rollouts=82, staleness_max=0, busy=0.1)]


def test_job_figures_count_dropped_rollouts_among_those_the_steps_took():
    metrics = [{"time/step_s": 20.0, "rollouts": 8, "rollouts/stale_dropped": 0, "reward/mean": 0.5},
               {"time/step_s": 4.0, "rollouts": 8, "rollouts/stale_dropped": 4, "reward/mean": 0.7,
                "staleness/max": 1, "utilisation/policy_0": 0.5}]
    figures = job_figures(metrics)
    assert figures["step_s"] == 4.0  # the first step (start-up) is not measured
    assert (figures["dropped"], figures["rollouts"]) == (4, 20)
    assert dropped_fraction(figures) == pytest.approx(0.2)
    assert figures["staleness_max"] == 1 and figures["policy_busy"] == 0.5


def test_pool_means_the_rates_and_sums_the_counts():
    pooled = pool(ASYNC)
    assert pooled["step_s"] == pytest.approx(11 / 3)
    assert pooled["reward"] == pytest.approx(0.66)
    assert pooled["policy_busy"] == pytest.approx(0.2)
    assert pooled["staleness_max"] == 1
    assert (pooled["dropped"], pooled["rollouts"]) == (3, 243)
    assert dropped_fraction(pooled) == pytest.approx(3 / 243)
    with pytest.raises(ValueError, match="at least one"):
        pool([])


def test_each_round_is_compared_with_its_own_synchronous_run():
    assert round_ratios(ASYNC, SYNC) == pytest.approx([0.5, 0.75, 0.4])
    with pytest.raises(ValueError, match="a round is missing"):
        round_ratios(ASYNC[:2], SYNC)


def test_the_spread_names_each_round_the_median_and_the_range():
    assert spread([0.5, 0.75, 0.4]) == "rounds 0.50, 0.75, 0.40; median 0.50, min-max 0.40-0.75"


def test_the_verdict_names_the_targets_missed():
    assert verdict([0.5, 0.75, 0.4], 0.01) == ("targets: median <= 0.6, every round <= 0.8, dropped <= 2%: met")
    assert verdict([0.5, 0.85, 0.4], 0.03) == ("targets: median <= 0.6, every round <= 0.8, dropped <= 2%:"
                                               " missed (every round <= 0.8, dropped <= 2%)")
    assert verdict([0.7, 0.7, 0.5], 0.0).endswith("missed (median <= 0.6)")


def test_the_last_line_carries_the_median_ratio_and_the_dropped_share():
    sync, one = pool(SYNC), pool(ASYNC)
    line = comparison_line(sync, one, ratio=0.5)
    assert line == ("async/sync step time: 0.50 (max_staleness 1; staleness max 1; reward sync 0.650 async 0.660;"
                    " policy busy 10% -> 20%; dropped 1%)")
    # without a median of rounds: the two jobs' own step times
    assert comparison_line(sync, one).startswith(f"async/sync step time: {one['step_s'] / sync['step_s']:.2f} (")
