"""`veri eval` on a Harbor dataset: pass@k per task on the verifier's reward, and its mean the way Harbor's
pass rate reads it (a verifier that could not run counted as 0) beside the mean over verified rollouts."""

from __future__ import annotations

import pytest

from tests.trainer.records import scored
from veri.core.episodes import build_episode
from veri.core.launch import VerifierResult
from veri.core.rollout_record import RolloutRecord, VerifierRecord
from veri.core.rules import VerifierError
from veri.loop.evals.report import eval_text
from veri.loop.evals.summary import summarize


def task_rollout(task: int, index: int, result: VerifierResult) -> RolloutRecord:
    base = scored(task, index, result.reward, name="verifier")
    return base.model_copy(update={
        "task": {"prompt": "p", "task_name": f"task-{task}"}, "verifier": VerifierRecord.of(result),
        "episode": build_episode(base.spans, verifier=result),
        "reward": base.reward if result.reward is not None else None})


def passed(reward: float) -> VerifierResult:
    return VerifierResult(exit_code=0, reward=reward, rewards={"reward": reward})


def test_pass_at_k_per_task_on_the_verifier_and_harbors_mean():
    records = [task_rollout(0, 0, passed(1.0)), task_rollout(0, 1, passed(0.0)), task_rollout(0, 2, passed(1.0)),
               task_rollout(1, 0, passed(0.0)), task_rollout(1, 1, VerifierResult(error=VerifierError.TIMEOUT)),
               task_rollout(1, 2, passed(1.0))]
    summary = summarize(records, ["verifier"], k=2, pass_threshold=1.0)
    table = summary["verifier"]
    assert table["rollouts"] == 6 and table["verified"] == 5 and table["failed"] == {"timeout": 1}
    first, second = table["tasks"]
    assert (first["task_name"], first["verified"], first["passed"], first["mean"]) == ("task-0", 3, 2, 2 / 3)
    assert first["pass_at_k"] == {"1": pytest.approx(2 / 3), "2": pytest.approx(1.0)}  # 1 - C(1,2)/C(3,2)
    assert second["failed"] == {"timeout": 1} and second["mean"] == 0.5
    assert second["mean_failed_as_0"] == pytest.approx(1 / 3)  # the timed-out trial counts as a 0 here only
    assert second["pass_at_k"]["2"] == pytest.approx(1.0)
    assert table["mean_failed_as_0"] == pytest.approx((2 / 3 + 1 / 3) / 2)
    assert table["pass_at_k"]["1"] == pytest.approx((2 / 3 + 1 / 2) / 2)
    # the rejected rollout is out of the job's own figures, as every rejected rollout is
    assert summary["rejected"] == {"verifier_timeout": 1}
    text = eval_text(summary | {"name": "e", "checkpoint": "final", "weights": "w", "samples_per_task": 3,
                                "temperature": 1.0, "archive": "a"})
    assert "verifier (the tasks' tests): 5 of 6 rollouts verified; could not run: timeout 1" in text
    assert any(line.split()[:3] == ["1", "task-1", "2/3"] for line in text.splitlines())


def test_a_dataset_without_tasks_has_no_verifier_table():
    assert "verifier" not in summarize([scored(0, 0, 1.0)], ["reward"], k=1, pass_threshold=1.0)
