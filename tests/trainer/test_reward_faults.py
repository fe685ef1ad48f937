"""Faulty reward functions: each is a masked `reward_error` of its kind, never a dead job nor a 0 scored
as a wrong answer. The scorer decides the verdicts (checked directly); `veri train` must then go on
(bench/reliability/scenarios/reward_faults.py: the same job and checks, more steps, in make reliability)."""

from __future__ import annotations

import asyncio
import math
import sys

import numpy as np
import pytest

from bench.reliability.scenarios.reward_faults import check_job, train, write_reward_job
from tests.rewards.test_rewards import inputs, score
from veri.core.rules import Rule
from veri.loop.rewards import RewardFunction, RewardScorer


@pytest.mark.parametrize(("value", "message"), [
    ([math.inf], "returned inf: return a finite number"),
    ([-math.inf], "returned -inf: return a finite number"),
    ([], "returned 0 values for 1 completion"),
    ([0.5, 0.5], "returned 2 values for 1 completion"),
    ({"score": 1.0}, "returned {'score': 1.0}"),
    (["x" * 100_000], "(str, 100002 characters)"),
])
def test_values_that_are_not_one_finite_number_are_bad_values(value, message):
    outcome = score(RewardFunction.wrap("judge", lambda **kw: value))
    [verdict] = outcome.verdicts
    assert outcome.reward is None and verdict.rule == Rule.REWARD_ERROR and verdict.details["kind"] == "bad_value"
    assert message in verdict.message and len(verdict.message) < 400, verdict.message


@pytest.mark.parametrize("value", [np.float32(0.25), np.int64(3), np.float64(0.25), True])
def test_numpy_scalars_are_numbers(value):
    assert score(RewardFunction.wrap("judge", lambda **kw: [value])).reward == float(value)


@pytest.mark.parametrize("value", [[math.nan], [None], None, math.nan])
def test_nan_or_none_alone_is_a_reward_error(value):
    outcome = score(RewardFunction.wrap("judge", lambda **kw: value))
    assert outcome.reward is None and [v.rule for v in outcome.verdicts] == [Rule.REWARD_ERROR]
    assert "no reward function returned a value" in outcome.verdicts[0].message


def test_an_async_function_that_exits_does_not_stop_the_event_loop():
    # asyncio re-raises SystemExit out of run_forever: unguarded, the shared loop would die and every later
    # async call (here `judge`, in the same scorer) would time out.
    async def quits(**kwargs):
        sys.exit(4)

    async def judge(**kwargs):
        await asyncio.sleep(0)
        return [1.0]

    with RewardScorer([RewardFunction.wrap("quits", quits)], 5) as scorer:
        outcome = scorer.score(inputs())
        assert "raised SystemExit: 4" in outcome.verdicts[0].message
        assert outcome.verdicts[0].details["kind"] == "exception"
        scorer.functions = [RewardFunction.wrap("judge", judge)]
        assert scorer.score(inputs()).reward == 1.0  # the loop still runs


def test_a_sync_function_that_exits_is_a_reward_error():
    outcome = score(RewardFunction.wrap("quits", lambda **kw: sys.exit(2)))
    assert outcome.reward is None and "raised SystemExit: 2" in outcome.verdicts[0].message


@pytest.mark.needs("process")
@pytest.mark.slow
def test_veri_train_goes_on_through_every_reward_fault(stack, tiny_model, tmp_path):
    policy, proxy = stack
    job = write_reward_job(tmp_path / "job", tiny_model, max_steps=2)
    result = train(job, policy.url, proxy.url, tmp_path / "jobs")
    assert result.returncode == 0, result.stderr[-6000:]
    counts, problems = check_job(tmp_path / "jobs" / "job", steps=2)
    assert problems == [], problems
    assert counts == {"rollouts": 36, "reward_error": 32, "trainable": 4}
