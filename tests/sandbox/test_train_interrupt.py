"""Stopping `veri train` mid-step, as a user does (Ctrl-C) or docker does (SIGTERM): exit 130, one line
that says how to continue, no sandbox of the job left running, nothing archived for the stopped step.
Its harness sleeps 600 s (tests/stack/interrupt_job), so only the stop can end the step."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from testkit.servers import RunningServer, start_server

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "tests" / "stack" / "interrupt_job"
NETWORK = "veri-test-rollouts"


@pytest.fixture(scope="module")
def servers(tiny_model: Path, tmp_path_factory) -> Iterator[tuple[RunningServer, RunningServer]]:
    """(policy, proxy): the sleeping harness never calls them, the trainer needs them up."""
    with start_server(["serve", "policy", "--model", str(tiny_model), "--threads", "1"]) as policy:
        store = tmp_path_factory.mktemp("spans")
        with start_server(["serve", "proxy", "--policy-url", policy.url, "--model", str(tiny_model),
                           "--store", str(store), "--max-tokens", "256"]) as proxy:
            yield policy, proxy


@pytest.fixture(scope="module")
def sleep_image(docker_client, tmp_path_factory) -> str:
    from veri.services.launcher.docker_backend import ensure_rollouts_network
    from veri.tools.harness.build import build_bundle_image

    ensure_rollouts_network(docker_client, NETWORK)
    return build_bundle_image(JOB / "bundle", docker_client, vendor_root=tmp_path_factory.mktemp("vendor"),
                              download=False)


def job_config(folder: Path, model: Path) -> Path:
    config = yaml.safe_load((JOB / "job.yaml").read_text())
    config["model"] = str(model)
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def job_sandboxes(docker_client, job: str, *, running: bool = False) -> list:
    return docker_client.containers.list(all=not running, filters={"label": f"veri.job={job}"})


def stop_mid_step(docker_client, command: list[str], job: str, sig: int, env: dict[str, str]) -> tuple[int, str]:
    """Start the trainer, wait until both sandboxes of step 0 run, send `sig`; (exit status, stderr)."""
    trainer = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, **env}, cwd=REPO)
    try:
        deadline = time.monotonic() + 300
        while len(job_sandboxes(docker_client, job, running=True)) < 2:
            if trainer.poll() is not None or time.monotonic() > deadline:
                trainer.kill()
                out, err = trainer.communicate()
                pytest.fail(f"no sandboxes ran (exit {trainer.returncode}):\n{out[-3000:]}\n{err[-5000:]}")
            time.sleep(0.5)
        trainer.send_signal(sig)
        _, err = trainer.communicate(timeout=90)
        return trainer.returncode, err
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait()


def assert_stopped_cleanly(docker_client, returncode: int, err: str, job: str, job_dir: Path,
                           *, removal_s: float) -> None:
    assert returncode == 130, err[-5000:]
    [line] = [line for line in err.splitlines() if line.startswith("veri train: stopped")]
    assert "stopped in step 0" in line and "no checkpoint yet" in line
    assert "continue with: veri train" in line and line.endswith("--resume"), line
    assert "Traceback" not in err, err[-5000:]
    deadline = time.monotonic() + removal_s
    while job_sandboxes(docker_client, job) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not job_sandboxes(docker_client, job), "a sandbox of the stopped job outlived it"
    assert not list((job_dir / "trajectories").rglob("rollout-*")), "the stopped step was archived"
    assert "step 0: stopped while its rollouts ran" in (job_dir / "logs" / "train.log").read_text()


def train_command(config: Path, servers, output: Path, job: str, *extra: str) -> list[str]:
    policy, proxy = servers
    return [sys.executable, "-m", "veri.cli", "train", str(config), "--base-dir", str(REPO), "--name", job,
            "--output", str(output), "--proxy-url", proxy.url, "--policy-url", policy.url, *extra]


def test_sigterm_stops_in_process_sandboxes(docker_client, servers, sleep_image, tiny_model, tmp_path):
    job = f"sigterm-{uuid.uuid4().hex[:6]}"
    command = train_command(job_config(tmp_path, tiny_model), servers, tmp_path / "jobs", job,
                            "--sandbox", "docker", "--image", sleep_image)
    returncode, err = stop_mid_step(docker_client, command, job, signal.SIGTERM, {"VERI_ROLLOUTS_NETWORK": NETWORK})
    # in process, the sandboxes are gone before the trainer exits
    assert_stopped_cleanly(docker_client, returncode, err, job, tmp_path / "jobs" / job, removal_s=0)


def test_ctrl_c_through_the_launcher_service(docker_client, servers, sleep_image, tiny_model, tmp_path):
    job = f"sigint-{uuid.uuid4().hex[:6]}"
    launcher_id = f"test-int-{uuid.uuid4().hex[:6]}"
    with start_server(["serve", "launcher", "--network", NETWORK, "--launcher-id", launcher_id,
                       "--output-root", str(tmp_path / "outputs")], env={"VERI_CONTROL_TOKEN": ""}) as launcher:
        command = train_command(job_config(tmp_path, tiny_model), servers, tmp_path / "jobs", job,
                                "--sandbox", "launcher", "--launcher-url", launcher.url, "--image", sleep_image)
        returncode, err = stop_mid_step(docker_client, command, job, signal.SIGINT, {"VERI_CONTROL_TOKEN": ""})
        # the launcher sees the trainer's connection close and removes the group's sandboxes
        assert_stopped_cleanly(docker_client, returncode, err, job, tmp_path / "jobs" / job, removal_s=10)
        assert "client went away mid-group" in launcher.log()
