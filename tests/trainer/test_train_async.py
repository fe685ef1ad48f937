"""`veri train` with max_staleness 1 on the tiny model (a subprocess, as a user runs it): rollouts run
while the trainer steps, a straggler is waited for at its deadline rather than dropped, and Ctrl-C +
resume work under async."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testkit.trainer_jobs import write_job, write_tasks
from tests.trainer.test_train import assert_timeline_matches_metrics, veri_train
from veri.archive import ArchiveIndex, read_metrics
from veri.core.rules import Rule

pytestmark = [pytest.mark.needs("process"), pytest.mark.slow]


def archived(job_dir: Path) -> list:
    """(step, record) for every archived rollout."""
    with ArchiveIndex(job_dir) as index:
        return [(row["step"], index.read_rollout(row["path"])) for row in index.rollouts(limit=1000)]


def async_job(tmp_path: Path, tiny_model: Path, tasks: list[dict] | None = None, **overrides) -> Path:
    job = write_job(tmp_path / "job", tiny_model, max_staleness=1, **overrides)
    write_tasks(job.parent / "tasks.jsonl", tasks or [
        {"prompt": "Look up the answer, please.", "expected": "beta"},
        {"prompt": "Look up the answer now.", "expected": "beta"},
    ])
    return job


def test_a_straggler_is_waited_for_at_its_deadline_and_trained_not_dropped(stack, tiny_model, tmp_path):
    """The first group's first rollout waits after its first call (sampled under version 0) until version 2
    is served or 10 s have passed. Dropping it at step 2 would throw its work away; admitted at step 0 it is
    due at step 1, which waits for it (version 2 cannot come before step 1 trains): trained one version old."""
    policy, _ = stack
    hold = {"marker": str(tmp_path / "held"), "policy_url": policy.url, "until": 2, "seconds": 10}
    job = async_job(tmp_path, tiny_model, [
        {"prompt": "Look up the answer, please.", "expected": "beta", "hold": hold},
        {"prompt": "Look up the answer now.", "expected": "beta"},
    ])
    result = veri_train(job, stack, tmp_path / "jobs")
    assert result.returncode == 0, result.stderr[-6000:]

    job_dir = tmp_path / "jobs" / "job"
    metrics = read_metrics(job_dir / "metrics.jsonl")
    assert [line["step"] for line in metrics] == [0, 1, 2]
    for line in metrics:  # every step trains its batch: 2 groups of 2, all on-policy or one version behind
        assert line["rollouts"] == 4 and line["staleness/max"] <= 1 and line["policy_version/stale_spans"] == 0
        assert "train/sampling/importance_sampling_ratio/mean" in line  # the correction ran (hf backend)
    assert [line["rollouts/stale_dropped"] for line in metrics] == [0, 0, 0]
    assert [line["tokens/stale_dropped"] for line in metrics] == [0, 0, 0]
    records = archived(job_dir)
    assert not any(v.rule == Rule.POLICY_VERSION_STALE for _, record in records for v in record.episode.verdicts)
    # The held rollout (the one that ran 10 s) was trained at step 1, its first call sampled under version 0
    # (its answer under 0 or 1: whether step 0 had trained within its 10 s wait depends on the box's load).
    [(step, held)] = [(step, record) for step, record in records
                      if record.spans[-1].started_at - record.spans[0].started_at >= 9]
    assert (step, held.staleness, held.spans[0].policy_version) == (1, 1, 0)
    assert {span.policy_version for span in held.spans} <= {0, 1}
    for step, record in records:  # trained rollouts carry their lag, their spans the versions that sampled them
        assert {span.policy_version for span in record.spans} <= {step - 1, step}
    assert "dropped" not in (job_dir / "logs" / "train.log").read_text()


def test_rollouts_run_while_the_trainer_steps(stack, tiny_model, tmp_path):
    """Groups for step s+1 are sampled under version s: some trained rollout has staleness 1, and none
    more; the steps still train on 4 rollouts each and the final weights are served."""
    job = async_job(tmp_path, tiny_model, max_steps=4)
    result = veri_train(job, stack, tmp_path / "jobs")
    assert result.returncode == 0, result.stderr[-6000:]
    job_dir = tmp_path / "jobs" / "job"
    metrics = read_metrics(job_dir / "metrics.jsonl")
    assert [line["step"] for line in metrics] == [0, 1, 2, 3]
    records = archived(job_dir)
    lags = [record.staleness for _, record in records]
    assert set(lags) <= {0, 1} and 1 in lags, lags
    for line in metrics:  # each step's count of one-version-old groups is what its archive holds
        behind = [record for step, record in records if step == line["step"] and record.staleness == 1]
        assert 2 * line["staleness/groups_1"] == len(behind), (line, [(s, r.staleness) for s, r in records])
    assert all(line["rollouts"] == 4 for line in metrics)
    # The timeline shows it: a rollout one version behind began before its step did (while the one
    # before trained), so its bar starts at a negative time.
    assert_timeline_matches_metrics(job_dir, metrics)
    lag = {record.rollout_id: record.staleness for _, record in records}
    bars = [bar for line in read_metrics(job_dir / "timeline.jsonl") for bar in line["rollouts"]]
    assert all(bar["segments"][0]["at"][0] < 0 for bar in bars if lag[bar["rollout_id"]] == 1)


def test_ctrl_c_stops_an_async_job_cleanly_and_resume_continues(stack, tiny_model, tmp_path):
    policy, proxy = stack
    job = async_job(tmp_path, tiny_model, max_steps=3)
    output = tmp_path / "jobs"
    command = [sys.executable, "-m", "veri.cli", "train", str(job), "--sandbox", "local", "--proxy-url", proxy.url,
               "--policy-url", policy.url, "--output", str(output), "--base-dir", str(job.parent)]
    metrics_file = output / "job" / "metrics.jsonl"
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not (metrics_file.exists() and metrics_file.read_text().strip()):  # step 0 trained
            assert process.poll() is None, process.communicate()[1][-4000:]
            assert time.monotonic() < deadline, "no step finished"
            time.sleep(0.2)
        process.send_signal(signal.SIGINT)  # groups for step 1 (and 2) are running now
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr[-4000:]
    assert "Traceback" not in stderr, stderr[-4000:]
    log = (output / "job" / "logs" / "train.log").read_text()
    assert "rollouts left untrained at the end" in log
    # Every archived rollout belongs to a step that trained (nothing half-archived).
    trained = {line["step"] for line in read_metrics(metrics_file)}
    assert {step for step, _ in archived(output / "job")} <= trained | {max(trained) + 1}

    resumed = veri_train(job, stack, output, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-6000:]
    assert [line["step"] for line in read_metrics(metrics_file)] == [0, 1, 2]
    assert {step for step, _ in archived(output / "job")} == {0, 1, 2}
