"""`veri train` on Harbor tasks, end to end: a tiny-model job of 2 steps over two tasks of the CPU demo set
(dataset `harbor: DIR`, `FROM python:3.11-slim` mapped by the job's image_map), the harbor_bash bundle in
each task's own image under runsc (docker backend, in process), each rollout scored by the task's tests
through the built-in `verifier` reward. The proxy and policy are the reliability bench's
(bench/reliability/scenarios/harness_faults.py); the tasks are network_mode = "no-network", so the proxy
joins the sealed network, as in test_run_harness_task.py. The tiny model answers noise: reward 0 is
expected, what matters is that every rollout took the whole path and was trained on."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from bench.reliability.scenarios.harness_faults import NETWORK, faults_stack
from tests.sandbox.conftest import ROOT
from veri.archive import ArchiveIndex, read_metrics
from veri.services.launcher.docker_backend import ensure_rollouts_network
from veri.services.launcher.docker_egress import network_names

pytestmark = pytest.mark.slow
DEMO = ROOT / "config/data/harbor_cpu"
BUNDLE = ROOT / "harness-bundles/harbor_bash"


@dataclass
class Stack:
    """The proxy (on the rollouts network and the sealed one) and the policy, the bundle's image, and the
    options every `veri train` / `veri eval` of this module passes."""
    options: list[str]
    env: dict[str, str]


@pytest.fixture(scope="module")
def stack(docker_client, tiny_model: Path, tmp_path_factory) -> Iterator[Stack]:
    from veri.tools.harness.build import build_bundle_image

    image = build_bundle_image(BUNDLE, docker_client)
    sealed = ensure_rollouts_network(docker_client, network_names(NETWORK)["none"])
    with faults_stack(docker_client, tiny_model, tmp_path_factory.mktemp("stack")) as running:
        sealed.connect(running.proxy_container)  # a no-network task's sandbox reaches the proxy and nothing else
        yield Stack(options=["--proxy-url", running.proxy_url, "--policy-url", running.policy_url,
                             "--control-token", running.token, "--sandbox", "docker", "--image", image],
                    env={**os.environ, "VERI_ROLLOUTS_NETWORK": NETWORK, "VERI_CONTROL_TOKEN": running.token})


def write_job(folder: Path, model: Path, split: str, tasks: list[str], **settings: object) -> Path:
    """A job on copies of `tasks` of the CPU demo's `split` (train or held_out), in folder/tasks."""
    for name in tasks:
        shutil.copytree(DEMO / split / name, folder / "tasks" / name)
    config = {
        "model": str(model), "backend": "hf", "dataset": {"harbor": str(folder / "tasks")},
        "image_map": {"python:3.11-slim": "veri/os-base"}, "harness_bundle": str(BUNDLE),
        "rollouts_per_prompt": 2, "max_turns": 1, "max_response_length": 64, "sampling": {"max_tokens": 16},
        "learning_rate": 1e-4, "max_steps": 2, "harness_timeout_s": 120, "max_parallel_rollouts": 4,
        "grpo": {"per_device_train_batch_size": 4}, **settings,
    }
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def veri(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "veri.cli", *args, *stack.options], capture_output=True, text=True,
                          timeout=600, cwd=ROOT, env=stack.env)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-5000:])
    return done


def test_two_steps_on_harbor_tasks(stack: Stack, tiny_model: Path, tmp_path: Path):
    tasks = ["copy-apple-to-violet", "count-errors-0"]
    # asynchronous (tests/stack/test_train_harbor.py runs a synchronous job through make train): a group
    # may sample while the trainer steps, its sandboxes and verifier as in the synchronous loop
    job = write_job(tmp_path, tiny_model, "train", tasks, max_staleness=1)
    name = f"harbor-train-{uuid.uuid4().hex[:6]}"
    veri(stack, "train", str(job), "--base-dir", str(tmp_path), "--name", name, "--output", str(tmp_path / "jobs"))
    job_dir = tmp_path / "jobs" / name
    assert json.loads((job_dir / "job.json").read_text())["status"] == "finished"

    metrics = read_metrics(job_dir / "metrics.jsonl")
    assert [line["step"] for line in metrics] == [0, 1], metrics
    with ArchiveIndex(job_dir) as index:
        paths = [index.layout.inside(row["path"]) for row in index.rollouts(limit=100)]
        records = [(index.read_rollout(path), path) for path in paths]
    assert len(records) == 2 * len(tasks) * 2  # 2 steps x 2 tasks x 2 rollouts
    for record, path in records:
        where = str(path.relative_to(job_dir))
        fired = sorted(verdict.rule.value for verdict in record.verdicts)
        # No rollout failed for an infrastructure reason: each ran, was verified and scored.
        assert record.status == "completed", (where, record.status, fired, path.with_suffix(".log").read_text()[-2000:])
        assert record.spans, (where, "the agent never reached the policy from inside the task's image")
        assert Path(record.task["harbor_task"]).parent == tmp_path / "tasks", record.task
        assert record.verifier is not None and record.verifier.ran, (where, record.verifier)
        assert record.verifier.reward in (0.0, 1.0), (where, record.verifier)
        assert record.reward is not None and record.reward.reward == record.verifier.reward, (where, record.reward)
        assert not [rule for rule in fired if rule.startswith("verifier_")], (where, fired)
        archived = path.with_suffix("") / "verifier"  # rollout-<K>/verifier/ beside rollout-<K>.json
        assert (archived / "reward.txt").is_file(), (where, sorted(p.name for p in path.parent.iterdir()))
        assert "reward.txt" in record.verifier.files, record.verifier.files
    for line in metrics:
        assert line["staleness/max"] <= 1, line
        assert "reward_fn/verifier/mean" in line, sorted(line)
        assert line.get("verifier/verified") == len(tasks) * 2 and line.get("verifier/failed") == 0, line
        assert isinstance(line.get("train/loss"), float), line


def test_eval_on_held_out_harbor_tasks(stack: Stack, tiny_model: Path, tmp_path: Path):
    tasks = ["copy-ocean-to-silver", "count-lines-6"]
    job = write_job(tmp_path, tiny_model, "held_out", tasks)
    done = veri(stack, "eval", str(job), "--base-dir", str(tmp_path), "-n", "2", "--name", "held-out",
                "--output", str(tmp_path / "jobs"), "--json")
    summary = json.loads(done.stdout)
    # the total and the built-in verifier reward (the one function of a harbor dataset)
    assert summary["functions"] == ["reward", "reward_fn/verifier"] and summary["k"] == 2, summary
    assert summary["scored"] == summary["rollouts"] == 4 and not summary["rejected"], summary
    assert summary["pass_at_k"]["reward_fn/verifier"].keys() == {"1", "2"}, summary["pass_at_k"]
    table = summary["verifier"]
    assert table["verified"] == table["rollouts"] == 4 and not table["failed"], table
    assert sorted(row["task_name"] for row in table["tasks"]) == [f"veri-demo/{name}" for name in tasks], table
    for row in table["tasks"]:
        assert row["verified"] == row["samples"] == 2 and row["mean"] in (0.0, 0.5, 1.0), row
        assert row["pass_at_k"].keys() == {"1", "2"}, row
    archive = tmp_path / "jobs" / "held-out"
    assert json.loads((archive / "eval.json").read_text())["verifier"] == table
    assert len(list(archive.glob("trajectories/step-0/task-*/rollout-*/verifier/reward.txt"))) == 4
