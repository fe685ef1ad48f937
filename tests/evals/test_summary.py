"""eval.json's figures from rollout records (real episodes), and `--held-out` against a job's archive."""

from __future__ import annotations

import pytest

from tests.trainer.records import failed, scored
from veri.archive import JobArchive
from veri.core.rollout_record import RewardOutcome
from veri.loop.evals.errors import EvalError
from veri.loop.evals.report import eval_text
from veri.loop.evals.run import held_out
from veri.loop.evals.summary import compare, summarize


def test_summary_per_function_and_task_leaves_rejected_rollouts_out():
    records = [scored(0, 0, 1.0), scored(0, 1, 0.0), scored(0, 2, 1.0), scored(1, 0, 0.5), failed(1, 1)]
    summary = summarize(records, ["reward"], k=2, pass_threshold=1.0)
    assert summary["rollouts"] == 5 and summary["scored"] == 4 and summary["rejected"] == {"harness_failed": 1}
    assert summary["reward_mean"]["reward"] == pytest.approx(2.5 / 4)
    low, high = summary["reward_ci"]["reward"]
    assert low <= 2.5 / 4 <= high
    # pass@1: task 0 2/3, task 1 0/1 -> 1/3; pass@2: only task 0 has 2 samples: 1 - C(1,2)/C(3,2) = 1.
    assert summary["pass_at_1"]["reward"] == pytest.approx(1 / 3)
    assert summary["pass_at_k"]["reward"] == {"1": pytest.approx(1 / 3), "2": pytest.approx(1.0)}
    assert [(t["task_index"], t["samples"], t["scored"], t["passed"]["reward"]) for t in summary["tasks"]] == [
        (0, 3, 3, 2), (1, 2, 1, 0)]
    lenient = summarize(records, ["reward"], k=2, pass_threshold=0.5)
    assert lenient["pass_at_1"]["reward"] == pytest.approx((2 / 3 + 1) / 2)


def test_a_function_named_reward_keeps_its_own_figures_next_to_the_total():
    # The CPU demo's exact-URL function has the default name `reward` and weight 1, closeness weight 0.5:
    # the exact-URL rate must not be hidden behind the weighted total.
    exact = RewardOutcome(reward=1.5, per_function={"reward": 1.0, "closeness": 1.0})
    near = RewardOutcome(reward=0.4, per_function={"reward": 0.0, "closeness": 0.8})
    records = [scored(0, 0, 0.0).model_copy(update={"reward": exact}),
               scored(0, 1, 0.0).model_copy(update={"reward": near})]
    summary = summarize(records, ["reward", "closeness"], k=1, pass_threshold=1.0)
    assert summary["functions"] == ["reward", "reward_fn/reward", "reward_fn/closeness"]
    assert summary["reward_mean"]["reward"] == pytest.approx(0.95)
    assert summary["reward_mean"]["reward_fn/reward"] == pytest.approx(0.5)
    assert summary["reward_mean"]["reward_fn/closeness"] == pytest.approx(0.9)
    assert summary["tasks"][0]["passed"] == {"reward": 1, "reward_fn/reward": 1, "reward_fn/closeness": 1}
    table = eval_text(summary | {"name": "e", "checkpoint": "final", "weights": "w", "samples_per_task": 2,
                                 "temperature": 0.8, "archive": "a"})
    assert [line.split()[:2] for line in table.splitlines()[2:5]] == [["total", "0.950"], ["reward", "0.500"],
                                                                     ["closeness", "0.900"]]


def test_compare_pairs_the_shared_tasks():
    a = summarize([scored(0, 0, 0.0), scored(1, 0, 0.0), scored(2, 0, 1.0)], ["reward"], k=1, pass_threshold=1)
    b = summarize([scored(0, 0, 1.0), scored(1, 0, 1.0)], ["reward"], k=1, pass_threshold=1)
    paired = compare(a, b)["functions"]["reward"]
    assert paired["tasks"] == 2 and paired["difference"] == pytest.approx(1.0)
    assert paired["p_value"] == pytest.approx(0.5)  # 2 tasks: 4 sign patterns, 2 as extreme


def test_held_out_leaves_out_the_tasks_the_job_trained_on(tmp_path):
    with JobArchive(tmp_path, "job") as archive:
        archive.write_rollout(0, scored(1, 0, 1.0))
        archive.write_rollout(0, scored(3, 0, 1.0))
    rows = [(i, {"prompt": str(i)}) for i in range(5)]
    assert [i for i, _ in held_out(rows, tmp_path / "job", split=False)] == [0, 2, 4]
    with pytest.raises(EvalError, match="trained on every selected task"):
        held_out(rows[1:2], tmp_path / "job", split=False)
    with pytest.raises(EvalError, match="not --split"):
        held_out(rows, tmp_path / "job", split=True)
    with pytest.raises(EvalError, match="never ran a step"):
        held_out(rows, tmp_path / "other", split=False)
