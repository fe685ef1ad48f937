"""`make train` on the tiny model through the whole stack: TRL steps, weight sync, gVisor rollouts
through the launcher service, and the archive a user then reads. The job (tests/stack/train_job/)
gives the two rollouts of a group different rewards, so the steps must move the weights."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import torch
from safetensors.torch import load_file

from tests.stack.conftest import REPO
from veri.core.rollouts import RolloutRecord

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]  # make train may rebuild veri/runtime first

JOB = "tests/stack/train_job/job.yaml"
TINY = REPO / "build" / "models" / "tiny"
FREE_TASK = "https://nothing.test/"  # the expected_url of the task no scripted rule matches


def test_make_train_tiny_moves_the_weights_and_writes_a_consistent_archive(stack):
    name = f"ci-{os.getpid()}"
    done = subprocess.run(["make", "--no-print-directory", "train", f"CONFIG={JOB}", f"NAME={name}"],
                          cwd=REPO, env=stack.env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, f"{done.stdout[-5000:]}\n{done.stderr[-5000:]}"
    job = stack.state / "jobs" / name
    assert f"archive in {job}" in done.stdout

    metrics = [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 1]
    for line in metrics:
        assert line["rollouts"] == 4
        assert {"time/rollout_s", "time/reward_s", "time/train_s", "time/weight_sync_s"} <= set(line)

    for step in (0, 1):
        records = [RolloutRecord.model_validate_json(p.read_text())
                   for p in sorted((job / "trajectories" / f"step-{step}").rglob("rollout-*.json"))]
        assert len(records) == 4
        by_task: dict[str, list[RolloutRecord]] = {}
        for record in records:
            assert record.status == "completed" and record.trainable, record.verdicts
            assert {span.policy_version for span in record.spans} == {step}
            by_task.setdefault(record.task["expected_url"], []).append(record)
        free_group = by_task.pop(FREE_TASK)
        [url_group] = by_task.values()
        for record in url_group:  # scripted: the right answer, after a fetched page
            assert record.reward.per_function["reward"] == 1.0
            row = record.episode.row
            # sampled tokens trained, the fetched page (environment) masked, logprobs 0.0 there
            assert 0 in row.env_mask and 1 in row.env_mask
            assert all(lp == 0.0 for lp, m in zip(row.logprobs, row.env_mask, strict=True) if m == 0)
        # sampled freely: the group's rewards differ, so its advantages are not 0
        assert len({record.reward.reward for record in free_group}) == 2, [r.reward for r in free_group]

    initial, final = load_file(TINY / "model.safetensors"), load_file(job / "model" / "model.safetensors")
    assert initial.keys() == final.keys()
    moved = [name for name, tensor in initial.items() if not torch.equal(tensor, final[name])]
    assert moved, "two GRPO steps with non-zero advantages left every weight as it was"
    assert list((job / "tensorboard").iterdir())
