"""`veri train` end to end on the tiny model, as a user runs it (a subprocess): local sandboxes, a real
capture proxy and hf policy server, TRL GRPO steps, weight sync after every step, the archive."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from testkit.trainer_jobs import write_job, write_tasks
from veri.archive import ArchiveIndex, read_metrics
from veri.core.episodes import RowKind
from veri.services.policy.hf.admin_client import PolicyAdmin

pytestmark = [pytest.mark.needs("process"), pytest.mark.slow]


def veri_on_stack(subcommand: str, job: Path, stack, output: Path, *extra: str) -> subprocess.CompletedProcess:
    """`veri train|eval JOB` as a user runs it, against the test stack with local sandboxes."""
    policy, proxy = stack
    command = [sys.executable, "-m", "veri.cli", subcommand, str(job), "--sandbox", "local", "--proxy-url",
               proxy.url, "--policy-url", policy.url, "--output", str(output), "--base-dir", str(job.parent), *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def veri_train(job: Path, stack, output: Path, *extra: str) -> subprocess.CompletedProcess:
    return veri_on_stack("train", job, stack, output, *extra)


def span_versions(job_dir: Path) -> dict[int, set[int]]:
    """Archive step -> the policy versions of every span of its rollouts."""
    versions: dict[int, set[int]] = {}
    with ArchiveIndex(job_dir) as index:
        for row in index.rollouts(limit=1000):
            record = index.read_rollout(row["path"])
            versions.setdefault(row["step"], set()).update(span.policy_version for span in record.spans)
    return versions


def assert_timeline_matches_metrics(job_dir: Path, metrics: list[dict]) -> None:
    """timeline.jsonl has a line per completed step: a bar per rollout with its model calls, the trainer's
    forward/backward and optimizer, the sync, and figures in [0, 1] that are the metrics line's."""
    timeline = {line["step"]: line for line in read_metrics(job_dir / "timeline.jsonl")}
    assert sorted(timeline) == [line["step"] for line in metrics]
    for line in metrics:
        record = timeline[line["step"]]
        assert len(record["rollouts"]) == line["rollouts"]
        assert sum(s["kind"] == "model" for bar in record["rollouts"] for s in bar["segments"]) > 0
        assert {p["kind"] for p in record["trainer"]} == {"forward_backward", "optimizer"}
        assert [p["kind"] for p in record["sync"]] == ["weight_sync"]
        for name, value in record["utilisation"].items():
            assert 0.0 <= value <= 1.0 and line[f"utilisation/{name}"] == pytest.approx(value, abs=1e-3)
        assert "policy_0" in record["utilisation"] and 0 < line["utilisation/trainer"] < 1
        assert record["trainer_idle"] and record["policy"]["0"]["idle"]  # the gaps are there to see


def test_a_side_call_is_trained_as_a_row_of_its_own(stack, tiny_model, tmp_path):
    """Each rollout makes a title call between its two turns: every trainable rollout is two rows, both in
    TRL's batch (the branch with its rollout's advantage), and no sampled token is dropped but the crashed
    rollout's."""
    job = write_job(tmp_path / "job", tiny_model, max_steps=1)
    write_tasks(job.parent / "tasks.jsonl", [
        {"prompt": "Look up the answer, please.", "expected": "beta", "side_call": True},
        {"prompt": "Look up the answer now.", "expected": "beta", "side_call": True, "fail_rollout": 1},
    ])
    result = veri_train(job, stack, tmp_path / "jobs")
    assert result.returncode == 0, result.stderr[-6000:]
    job_dir = tmp_path / "jobs" / "job"
    (line,) = read_metrics(job_dir / "metrics.jsonl")
    assert line["trainable"] == 3 and line["train/rows/branch_rows"] == 3  # one side-call row per trained rollout
    assert line["rows/per_rollout"] == 6 / 4 and line["tokens/dropped_fraction"] == 0  # the crash made no call
    with ArchiveIndex(job_dir) as index:
        records = [index.read_rollout(row["path"]) for row in index.rollouts(limit=10)]
    trained = [record for record in records if record.trainable]
    assert len(trained) == 3
    for record in trained:
        (side,) = record.episode.branches
        assert side.kind == RowKind.SIDE_CALL and side.spans == [1] and record.episode.chain == [0, 2]
        account = record.tokens
        assert account.sampled == account.trained > 0 and account.dropped == {}


def test_train_steps_sync_weights_and_archive_every_rollout(stack, tiny_model, tmp_path):
    job = write_job(tmp_path / "job", tiny_model)
    result = veri_train(job, stack, tmp_path / "jobs")
    assert result.returncode == 0, result.stderr[-6000:]

    job_dir = tmp_path / "jobs" / "job"
    metrics = read_metrics(job_dir / "metrics.jsonl")
    assert [line["step"] for line in metrics] == [0, 1, 2]
    for line in metrics:
        assert math.isfinite(line["train/loss"]) and line["train/grad_norm"] > 0
        assert line["rollouts"] == 4 and line["trainable"] == 3 and line["rule/harness_failed"] == 1
        assert line["time/weight_sync_s"] > 0 and line["policy_version/stale_spans"] == 0

    assert_timeline_matches_metrics(job_dir, metrics)

    # Every span of step k was sampled by policy version k (0 = the model folder's weights).
    assert span_versions(job_dir) == {0: {0}, 1: {1}, 2: {2}}
    assert PolicyAdmin(stack[0].url).policy_version() == 3  # the server serves the final weights
    assert [p.name for p in (job_dir / "weights").iterdir()] == ["step-000003"]

    # The final model is a transformers folder, and every parameter moved (TRL's test habit).
    initial = load_file(tiny_model / "model.safetensors")
    final = load_file(job_dir / "model" / "model.safetensors")
    assert initial.keys() == final.keys()
    unchanged = [name for name, tensor in initial.items() if torch.equal(tensor, final[name])]
    assert not unchanged
    assert (job_dir / "model" / "tokenizer.json").is_file() and (job_dir / "model" / "config.json").is_file()

    # A second run of the same job must be asked to resume; resumed, it continues at the next step.
    again = veri_train(job, stack, tmp_path / "jobs")
    assert again.returncode == 1 and "pass --resume" in again.stderr
    job = write_job(tmp_path / "job", tiny_model, max_steps=4)
    resumed = veri_train(job, stack, tmp_path / "jobs", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-6000:]
    metrics = read_metrics(job_dir / "metrics.jsonl")
    assert [line["step"] for line in metrics] == [0, 1, 2, 3]
    # The trainer names each version: after the resume push the server is at the checkpoint's step, so
    # step 3's spans carry version 3 even though the server took a fourth update.
    assert metrics[-1]["policy_version/expected"] == 3 and metrics[-1]["policy_version/stale_spans"] == 0
    assert span_versions(job_dir)[3] == {3}
    assert "pushed the trainer's weights as version 3" in (job_dir / "logs" / "train.log").read_text()


def test_lora_job_syncs_merged_weights_and_saves_a_merged_model(stack, tiny_model, tmp_path):
    job = write_job(tmp_path / "job", tiny_model, max_steps=2, lora_rank=4, learning_rate=1e-2)
    result = veri_train(job, stack, tmp_path / "jobs")
    assert result.returncode == 0, result.stderr[-6000:]

    job_dir = tmp_path / "jobs" / "job"
    assert span_versions(job_dir) == {0: {0}, 1: {1}}
    initial = load_file(tiny_model / "model.safetensors")
    final = load_file(job_dir / "model" / "model.safetensors")
    assert initial.keys() == final.keys()  # merged: no adapter tensors, the base model's names
    changed = {name for name, tensor in initial.items() if not torch.equal(tensor, final[name])}
    linear = {name for name in initial if name.endswith("proj.weight")}
    assert changed == linear  # LoRA on every linear layer (not the lm_head), nothing else moved


def test_the_console_shows_veri_lines_and_the_libraries_log_keeps_the_rest(stack, tiny_model, tmp_path):
    job = write_job(tmp_path / "job", tiny_model, max_steps=1)
    result = veri_train(job, stack, tmp_path / "jobs")
    assert result.returncode == 0, result.stderr[-6000:]

    console = result.stdout + result.stderr
    assert "step 0: 3/4 rollouts trainable" in result.stdout and "final model:" in result.stdout, console
    for noise in ("FutureWarning", "Writing model shards", "Loading weights", "experimental"):
        assert noise not in console, f"{noise!r} reached the console:\n{console[-4000:]}"
    # The deprecations and TRL's notice about rollout_func are kept, in the job's libraries log.
    libraries = (tmp_path / "jobs" / "job" / "logs" / "libraries.log").read_text()
    assert "FutureWarning" in libraries and "experimental feature" in libraries, libraries[-3000:]


def test_eval_every_evaluates_the_held_out_tasks_after_the_sync(stack, tiny_model, tmp_path):
    """`eval_every: 1` (docs/evaluating.md) runs the eval_dataset after each step's weight sync: eval/... on the
    step's metrics line next to the training reward, an eval archive per policy version beside the job, which
    the console lists on the job page; its rollouts were sampled by the weights just trained."""
    job = write_job(tmp_path / "job", tiny_model, max_steps=2, eval_every=1, eval_samples=2,
                    eval_dataset={"path": "held_out.jsonl"})
    write_tasks(job.parent / "held_out.jsonl", [{"prompt": "Look up the held-out answer.", "expected": "beta"}])
    result = veri_train(job, stack, tmp_path / "jobs")
    assert result.returncode == 0, result.stderr[-6000:]
    assert "eval reward mean" in result.stdout
    metrics = read_metrics(tmp_path / "jobs" / "job" / "metrics.jsonl")
    assert [line["eval/policy_version"] for line in metrics] == [1, 2]
    for line in metrics:
        assert line["eval/rollouts"] == 2 and 0 <= line["eval/reward/mean"] <= 1 and "eval/reward/pass_at_1" in line
        assert "reward/mean" in line and line["time/eval_s"] > 0
    for version in (1, 2):
        folder = tmp_path / "jobs" / f"job-eval-step-{version}"
        summary = json.loads((folder / "eval.json").read_text())
        assert summary["job"] == "job" and summary["policy_version"] == version and summary["rollouts"] == 2
        assert summary["reward_mean"]["reward"] == metrics[version - 1]["eval/reward/mean"]
        with ArchiveIndex(folder) as index:
            records = [index.read_rollout(row["path"]) for row in index.rollouts(limit=10)]
        assert len(records) == 2 and all(record.task_index == 0 for record in records)
        assert {span.policy_version for record in records for span in record.spans} == {version}
    assert span_versions(tmp_path / "jobs" / "job") == {0: {0}, 1: {1}}  # training's own spans, unchanged
    from veri.services.console.jobs import JobFolders

    evals = JobFolders(tmp_path / "jobs").evals_of("job")
    assert [entry["name"] for entry in evals] == ["job-eval-step-2", "job-eval-step-1"]
