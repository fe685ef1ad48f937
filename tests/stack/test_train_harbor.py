"""`make train` on a Harbor task through the whole stack: the host builds the task's image, the bundle's
runtime tree and the verifier's tools and stages the tests (`veri tasks stage`), the trainer container
(no Docker) reads what was staged, the launcher service runs each rollout in the task's own image under
runsc, then the task's hidden tests, and the verifier's reward trains. The session stack's scripted policy
answers the task with its solution (conftest.HARBOR_RULE): a reward of 1 can come only from the tests."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.stack.conftest import REPO
from veri.archive import read_metrics
from veri.core.rollout_record import RolloutRecord

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

HARBOR_JOB = "tests/stack/harbor_job/job.yaml"


def test_make_train_runs_a_harbor_task_in_its_image_and_trains_on_its_verifier(stack):
    name = f"harbor-{os.getpid()}"
    done = subprocess.run(["make", "--no-print-directory", "train", f"CONFIG={HARBOR_JOB}", f"NAME={name}"],
                          cwd=REPO, env=stack.env, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, f"{done.stdout[-5000:]}\n{done.stderr[-5000:]}"
    staged = json.loads((stack.state / "configs" / f"{name}.tasks.json").read_text())
    [(folder, entry)] = staged["tasks"].items()
    assert folder == "config/data/harbor_cpu/train/write-word-apple", staged
    tasks_build = (REPO / "build" / "tasks").resolve()
    assert entry["tests_dir"].startswith(f"{tasks_build}/staged/"), entry  # where the launcher reads it

    job = stack.state / "jobs" / name
    metrics = read_metrics(job / "metrics.jsonl")
    assert [line["step"] for line in metrics] == [0, 1], metrics
    for line in metrics:
        assert line["reward_fn/verifier/mean"] == 1.0, line
        assert line.get("verifier/verified") == 2 and line.get("verifier/failed") == 0, line
    records = [(RolloutRecord.model_validate_json(path.read_text()), path)
               for path in sorted((job / "trajectories").rglob("rollout-*.json"))]
    assert len(records) == 4
    for record, path in records:
        assert record.status == "completed" and record.trainable, (path, record.verdicts)
        assert record.verifier is not None and record.verifier.ran and record.verifier.reward == 1.0, record.verifier
        assert record.reward is not None and record.reward.reward == 1.0, record.reward
        assert "echo apple > /app/answer.txt" in str(record.spans[0].reply_message.get("content")), record.spans[0]
        assert (path.with_suffix("") / "verifier" / "reward.txt").read_text().strip() == "1"
