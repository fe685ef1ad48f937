"""`make train` on the tiny model through the whole stack: TRL steps, weight sync, gVisor rollouts
through the launcher service, and the archive a user then reads."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.stack.conftest import REPO
from veri.core.rollouts import RolloutRecord

pytestmark = pytest.mark.slow


def test_make_train_tiny_writes_a_consistent_archive(stack):
    name = f"ci-{os.getpid()}"
    done = subprocess.run(["make", "--no-print-directory", "train", "CONFIG=config/url_extract_tiny.yaml",
                           f"NAME={name}"], cwd=REPO, env=stack.env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, f"{done.stdout[-5000:]}\n{done.stderr[-5000:]}"
    job = stack.state / "jobs" / name
    assert f"archive in {job}" in done.stdout

    metrics = [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 1]
    for line in metrics:
        assert line["rollouts"] == 4 and line["reward/mean"] == 1.0
        assert {"time/rollout_s", "time/reward_s", "time/train_s", "time/weight_sync_s"} <= set(line)

    for step in (0, 1):
        records = [RolloutRecord.model_validate_json(p.read_text())
                   for p in sorted((job / "trajectories" / f"step-{step}").rglob("rollout-*.json"))]
        assert len(records) == 4
        for record in records:
            assert record.status == "completed" and record.trainable, record.verdicts
            assert {span.policy_version for span in record.spans} == {step}
            row = record.episode.row
            # sampled tokens trained, the fetched page (environment) masked, logprobs 0.0 there
            assert 0 in row.env_mask and 1 in row.env_mask
            assert all(lp == 0.0 for lp, m in zip(row.logprobs, row.env_mask) if m == 0)
    assert (job / "model" / "config.json").exists()
    assert list((job / "tensorboard").iterdir())
