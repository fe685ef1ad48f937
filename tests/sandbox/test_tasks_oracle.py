"""`veri tasks oracle` on real task folders, under runsc: the Harbor cookbook's simple-task and multi-reward
(unmodified, FROM ubuntu:24.04 mapped to veri/task-os-base, their test.sh's apt/curl/uvx served offline)
and two tasks of the CPU demo set (FROM python:3.11-slim mapped). Each task's solution scores 1 and doing
nothing 0; a task whose solution is wrong fails the command, named. The one online step (vendoring the
cookbook's pytest wheels and uv) runs once into build/ and is kept, as test_tasks_offline.py does. Two groups
in all (oracle, nop): the images are built once and shared."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.sandbox.conftest import ROOT, unavailable
from veri.cli import main
from veri.tools.tasks.vendor import VendorError, vendor_tasks

COOKBOOK = ROOT / "tests/fixtures/harbor/harbor-cookbook"
DEMO = ROOT / "config/data/harbor_cpu/train"
TASKS = [COOKBOOK / "simple-task", COOKBOOK / "multi-reward", DEMO / "copy-apple-to-violet", DEMO / "count-errors-0"]
MAP = ["--image-map", "ubuntu:24.04=veri/task-os-base", "--image-map", "python:3.11-slim=veri/task-os-base"]


@pytest.fixture(scope="module")
def vendor(docker_client) -> Path:
    out = ROOT / "build" / "tasks" / "test-vendor-oracle"
    names = ("environment/Dockerfile", "tests/test.sh")
    inputs = "".join((task / name).read_text() for task in TASKS for name in names)
    done = out / ".vendored"
    if done.is_file() and done.read_text() == inputs:
        return out
    try:
        vendor_tasks(TASKS, out, log=lambda line: None)
    except VendorError as exc:
        unavailable(f"`veri tasks vendor` needs Debian's mirror and PyPI once: {exc}")
    done.write_text(inputs)
    return out


@pytest.fixture(scope="module")
def wrong_solution(tmp_path_factory) -> Path:
    """A demo task whose solution writes the wrong file: its oracle must fail the command."""
    task = tmp_path_factory.mktemp("tasks") / "copy-apple-wrong"
    shutil.copytree(DEMO / "copy-apple-to-violet", task)
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\necho not-the-apple > /app/violet.txt\n")
    return task


def oracle(capsys, *args: str) -> tuple[int, list[str]]:
    code = main(["tasks", "oracle", *args, *MAP])
    return code, capsys.readouterr().out.splitlines()


def test_the_oracle_scores_1_and_a_wrong_solution_fails_the_command(vendor, wrong_solution, capsys):
    code, lines = oracle(capsys, *map(str, TASKS), str(wrong_solution), "--vendor", str(vendor))
    assert lines[:4] == ["simple-task: reward 1: ok",
                         "multi-reward: reward 1 (correctness=1 performance=1): ok",
                         "copy-apple-to-violet: reward 1: ok",
                         "count-errors-0: reward 1: ok"], lines
    assert lines[4] == "copy-apple-wrong: reward 0: FAILED: the oracle's solution scored below 1 (reward)", lines
    assert lines[5] == "oracle: 4 of 5 tasks passed; failed: copy-apple-wrong" and code == 1


def test_doing_nothing_scores_0(vendor, capsys):
    code, lines = oracle(capsys, "--agent", "nop", *map(str, TASKS), "--vendor", str(vendor))
    assert lines == ["simple-task: reward 0: ok",
                     "multi-reward: reward 0 (correctness=0 performance=0): ok",
                     "copy-apple-to-violet: reward 0: ok",
                     "count-errors-0: reward 0: ok",
                     "nop: 4 of 4 tasks passed"], lines
    assert code == 0


@pytest.mark.parametrize("image", ["veri/os-base", "veri/not-on-this-machine:1"])
def test_a_prebuilt_docker_image_is_used_as_is_never_pulled(docker_client, tmp_path: Path, image: str):
    from veri.tools.tasks.build import TaskBuildError
    from veri.tools.tasks.prepare import prepare_tasks

    task = tmp_path / "prebuilt"
    shutil.copytree(DEMO / "copy-apple-to-violet", task)
    shutil.rmtree(task / "environment")
    toml = (task / "task.toml").read_text().replace("[environment]\n", f'[environment]\ndocker_image = "{image}"\n')
    (task / "task.toml").write_text(toml)
    if image == "veri/os-base":
        prepared = prepare_tasks([task], tmp_path / "no-vendor", client=docker_client, log=lambda line: None)
        assert prepared[str(task.resolve())]["image"] == "veri/os-base"
        # its own WORKDIR, USER and PATH, read here for a launcher that cannot inspect it (the stack's on k8s)
        config = docker_client.images.get("veri/os-base").attrs["Config"]
        path = dict(item.split("=", 1) for item in config.get("Env") or []).get("PATH")
        assert prepared[str(task.resolve())]["image_config"] == {
            "workdir": config["WorkingDir"] or None, "user": (config["User"] or "").split(":")[0] or None, "path": path}
    else:
        with pytest.raises(TaskBuildError, match="is not on this machine .rollouts pull nothing.: `docker pull"):
            prepare_tasks([task], tmp_path / "no-vendor", client=docker_client, log=lambda line: None)
