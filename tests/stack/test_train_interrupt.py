"""Ctrl-C in the terminal of `make train` (SIGINT to its whole process group): the trainer stops, the
launcher removes the step's sandboxes, compose removes the trainer container, the job folder stays,
and the last lines say how to continue. The job's harness sleeps 600 s (tests/stack/interrupt_job)."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import docker
import pytest

from tests.stack.conftest import REPO

pytestmark = [pytest.mark.needs("docker"), pytest.mark.slow]

CONFIG = "tests/stack/interrupt_job/job.yaml"


def test_ctrl_c_stops_make_train_and_leaves_nothing_running(stack):
    name = f"ctrl-c-{os.getpid()}"
    client = docker.from_env(timeout=60)
    project = stack.env["VERI_PROJECT"]

    def sandboxes() -> list:
        return client.containers.list(all=True, filters={"label": f"veri.job={name}"})

    def trainers() -> list:
        return client.containers.list(all=True, filters={"label": [f"com.docker.compose.project={project}",
                                                                   "com.docker.compose.service=trainer"]})

    make = subprocess.Popen(["make", "--no-print-directory", "train", f"CONFIG={CONFIG}", f"NAME={name}"], cwd=REPO,
                            env=stack.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # its own process group, as a terminal gives it
    try:
        deadline = time.monotonic() + 600
        while len([c for c in sandboxes() if c.status == "running"]) < 2:
            if make.poll() is not None or time.monotonic() > deadline:
                os.killpg(make.pid, signal.SIGKILL)
                pytest.fail(f"the step's sandboxes never ran:\n{make.communicate()[0][-6000:]}")
            time.sleep(1)
        os.killpg(make.pid, signal.SIGINT)  # Ctrl-C
        output = make.communicate(timeout=120)[0]
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGKILL)
            make.wait()

    # make dies of the SIGINT it relays (a shell shows 130); train.sh itself ends 130
    assert make.returncode in (-signal.SIGINT, 130), output[-6000:]
    job = stack.state / "jobs" / name
    [line] = [line for line in output.splitlines() if line.startswith("make train: stopped")]
    assert "last checkpoint: none yet" in line and f"job folder {job};" in line, output[-6000:]
    assert line.endswith(f"continue with: make train CONFIG={CONFIG} RESUME=1 NAME={name}")
    # the docker CLI stops relaying the trainer's output at Ctrl-C: its own account is in the job's log
    assert "step 0: stopped while its rollouts ran" in (job / "logs" / "train.log").read_text()
    deadline = time.monotonic() + 10
    while (sandboxes() or trainers()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not sandboxes(), "a sandbox of the stopped job outlived it"
    assert not trainers(), "the trainer container outlived make train"
    assert not list((job / "trajectories").rglob("rollout-*"))
