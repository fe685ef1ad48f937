"""A Harbor task's verifier in the archive and what reads it: the result in the rollout record, its
/logs/verifier files in rollout-<K>/verifier/ (capped), the console's trajectory section, `veri debug`'s
verdict, and the signal counting verifiers that could not run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from testkit.spans import bridged_chain
from veri.archive import JobArchive, read_rollout, step_metrics
from veri.archive.signals import detect_archive
from veri.archive.verifier_files import write_verifier_files
from veri.core.episodes import RolloutStatus, build_episode
from veri.core.launch import VerifierResult
from veri.core.rollout_record import RewardOutcome, RolloutRecord, VerifierRecord
from veri.core.rules import VerifierError
from veri.core.signals import SignalsConfig
from veri.services.console.app import create_app
from veri.services.console.settings import ConsoleSettings
from veri.tools.harness.debug import explain

pytestmark = pytest.mark.needs("app")

PASSED = VerifierResult(exit_code=0, reward=1.0, rewards={"reward": 1.0, "correctness": 1.0},
                        stdout_tail="test_hello PASSED\n2 passed in 0.1s", duration_s=3.1,
                        files={"ctrf.json": '{"results": {}}', "test-stdout.txt": "2 passed", "reward.json": "{}"})
TIMED_OUT = VerifierResult(error=VerifierError.TIMEOUT, message="test.sh ran past [verifier] timeout_sec=5",
                           exit_code=124, stdout_tail="collecting ...", duration_s=5.0)


def task_record(index: int, result: VerifierResult) -> RolloutRecord:
    spans = bridged_chain()
    reward = RewardOutcome(reward=result.reward, per_function={"verifier": result.reward}) if result.reward else None
    return RolloutRecord(rollout_id=f"r-0-{index}", task_index=0, rollout_index=index, task={"prompt": "make hello"},
                         status=RolloutStatus.COMPLETED, exit_code=0, spans=spans,
                         episode=build_episode(spans, exit_code=0, verifier=result), reward=reward,
                         verifier=VerifierRecord.of(result))


@pytest.fixture
def job(tmp_path: Path) -> Path:
    with JobArchive(tmp_path / "jobs", "harbor") as archive:
        archive.start_job(model="m", max_steps=1, config={"model": "m"})
        records = [task_record(0, PASSED), task_record(1, TIMED_OUT), task_record(2, PASSED)]
        for item, result in zip(records, (PASSED, TIMED_OUT, PASSED), strict=True):
            archive.write_rollout(0, item, harness_log="", verifier_files=result.files)
        archive.write_step_metrics(0, step_metrics(records, {"rollout": 1.0}))
    return tmp_path / "jobs" / "harbor"


def test_the_record_and_the_verifier_folder(job: Path):
    task = job / "trajectories/step-0/task-0"
    kept = read_rollout(task / "rollout-0.json").verifier
    assert kept is not None and kept.reward == 1.0 and kept.rewards["correctness"] == 1.0 and kept.exit_code == 0
    assert kept.files == ["ctrf.json", "reward.json", "test-stdout.txt"] and kept.files_left_out == []
    assert (task / "rollout-0/verifier/ctrf.json").read_text() == '{"results": {}}'
    assert (task / "rollout-0/verifier/test-stdout.txt").read_text() == "2 passed"
    failed = read_rollout(task / "rollout-1.json").verifier
    assert failed is not None and failed.error == VerifierError.TIMEOUT and failed.exit_code == 124
    assert not (task / "rollout-1").exists()  # no files: no folder


def test_the_verifier_folder_is_capped_and_stays_inside(tmp_path: Path):
    files = {"big.log": "x" * 600, "ctrf.json": "{}", "sub/out.txt": "y" * 300, "../escape": "z", "/abs": "z"}
    written, left_out = write_verifier_files(tmp_path / "verifier", files, limit=400)
    assert written == ["ctrf.json", "sub/out.txt"] and left_out == ["../escape", "/abs", "big.log"]
    assert (tmp_path / "verifier/sub/out.txt").read_text() == "y" * 300
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["ctrf.json", "out.txt"]


def test_the_trajectory_page_shows_the_verifier(job: Path):
    with TestClient(create_app(ConsoleSettings(state_dir=job.parents[1])), base_url="http://127.0.0.1") as client:
        passed = client.get("/jobs/harbor/steps/0/tasks/0/rollouts/0").text
        timed_out = client.get("/jobs/harbor/steps/0/tasks/0/rollouts/1").text
    assert 'id="verifier"' in passed and "2 passed in 0.1s" in passed and "correctness 1" in passed
    assert "ctrf.json, reward.json, test-stdout.txt" in passed
    assert "verifier_timeout" in timed_out and "ran past [verifier] timeout_sec=5" in timed_out
    assert "never scored 0" in timed_out and "collecting ..." in timed_out and "exit code 124" in timed_out


def test_veri_debug_shows_the_verifiers_verdict(job: Path):
    record = json.loads((job / "trajectories/step-0/task-0/rollout-1.json").read_text())
    text = explain(record)
    assert "verifier timeout: test.sh ran past [verifier] timeout_sec=5 (exit code 124, 5.0s)" in text
    assert "verifier_timeout (reject)" in text and "REJECTED" in text
    passed = explain(json.loads((job / "trajectories/step-0/task-0/rollout-0.json").read_text()))
    assert "verifier reward 1 (correctness 1) (exit code 0, 3.1s)" in passed and "verifier_" not in passed


def test_the_signal_counts_verifiers_that_could_not_run(job: Path):
    [raised] = [r for r in detect_archive(job, SignalsConfig()) if r.signal == "verifier_failures"]
    assert raised.step == 0 and raised.message.startswith("1 of 3 rollouts' task verifiers could not run (1 timed out)")
    assert [r["rollout_id"] for r in raised.rollouts] == ["r-0-1"]


def test_the_step_metrics_count_the_verifiers(job: Path):
    from veri.archive import read_metrics

    [line] = read_metrics(job / "metrics.jsonl")
    assert line["verifier/verified"] == 2 and line["verifier/failed"] == 1 and line["verifier/reward/mean"] == 1.0
    assert line["rule/verifier_timeout"] == 1
