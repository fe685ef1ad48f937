"""`veri tasks stage` (tools/tasks/stage.py) makes a job's Harbor tasks ready for the stack: the host builds
and stages, the trainer container (no Docker) reads the staged file, the launcher container reads each
task's tests from the tasks build folder it mounts at the host's path. Tested without Docker: what is
copied where, the file's keys as the container's checkout sees them, and the refusals with their fixes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from veri.cli import build_parser
from veri.loop.collect.errors import StackError
from veri.loop.collect.harbor import load_staged, task_env_for
from veri.loop.collect.stack_args import harbor_tasks_of
from veri.tools.tasks.stage import StageError, stage_for_launcher, write_staged

DEMO = Path(__file__).resolve().parents[2] / "config/data/harbor_cpu/train/copy-apple-to-violet"
COMMAND = ["/veri/rt/bin/python3", "/veri/rt/harness/agent.py"]
IMAGE_CONFIG = {"workdir": "/app", "user": None, "path": "/usr/local/bin:/usr/bin:/bin"}  # as prepare_tasks reads it


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    shutil.copytree(DEMO, root / "tasks" / DEMO.name)
    return root


def prepared(task: Path, build: Path) -> dict:
    return {str(task): {"image": "veri/task-x:1", "runtime_tree": str(build / "runtime" / "abc"),
                        "tools_dir": None, "harness_command": COMMAND, "image_config": IMAGE_CONFIG}}


def test_tests_and_solution_are_copied_into_the_build_folder_once_per_content(checkout: Path, tmp_path: Path):
    build, task = tmp_path / "build-tasks", checkout / "tasks" / DEMO.name
    staged = stage_for_launcher(prepared(task, build), build)[str(task)]
    tests, solution = Path(staged["tests_dir"]), Path(staged["solution_dir"])
    assert tests.parent.parent == build / "staged" and solution.parent == tests.parent
    assert (tests / "test.sh").read_bytes() == (task / "tests" / "test.sh").read_bytes()
    assert (solution / "solve.sh").is_file() and staged["image"] == "veri/task-x:1"
    assert stage_for_launcher(prepared(task, build), build)[str(task)] == staged  # unchanged: the same copy
    (task / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    edited = stage_for_launcher(prepared(task, build), build)[str(task)]
    assert edited["tests_dir"] != staged["tests_dir"]  # an edit is a new copy: a running job keeps its own
    assert (tests / "test.sh").read_bytes() == (DEMO / "tests" / "test.sh").read_bytes()


def test_a_tree_outside_the_launchers_mount_or_a_linked_test_is_refused(checkout: Path, tmp_path: Path):
    build, task = tmp_path / "build-tasks", checkout / "tasks" / DEMO.name
    elsewhere = {str(task): {**prepared(task, build)[str(task)], "runtime_tree": str(tmp_path / "other" / "rt")}}
    with pytest.raises(StageError, match="outside the tasks build folder .* VERI_TASKS_BUILD"):
        stage_for_launcher(elsewhere, build)
    (task / "tests" / "helper.sh").symlink_to("/etc/passwd")
    with pytest.raises(StageError, match="tests/helper.sh is a symbolic link"):
        stage_for_launcher(prepared(task, build), build)


def test_the_staged_file_is_keyed_as_the_trainer_containers_checkout_sees_it(checkout: Path, tmp_path: Path):
    build, task = tmp_path / "build-tasks", checkout / "tasks" / DEMO.name
    out = tmp_path / "state" / "configs" / "job.tasks.json"
    write_staged(stage_for_launcher(prepared(task, build), build), out, checkout)
    assert list(json.loads(out.read_text())["tasks"]) == [f"tasks/{DEMO.name}"]
    assert out.stat().st_mode & 0o777 == 0o644 and out.parent.stat().st_mode & 0o777 == 0o755

    container = tmp_path / "work"  # the same checkout at another path: the trainer's /work
    shutil.copytree(checkout, container)
    loaded = load_staged(out, container)
    row_folder = str((container / "tasks" / DEMO.name).resolve())
    assert list(loaded) == [row_folder]
    env = task_env_for({"harbor_task": row_folder}, loaded)
    assert env is not None and env.tests_dir == loaded[row_folder]["tests_dir"]  # the staged copy, not /work's
    assert env.image == "veri/task-x:1" and env.harness_command == COMMAND
    # the image's own config travels with the launch: the stack's launcher container cannot inspect the image
    assert env.image_config is not None and env.image_config.model_dump() == IMAGE_CONFIG
    older = {folder: {k: v for k, v in entry.items() if k != "image_config"} for folder, entry in loaded.items()}
    assert task_env_for({"harbor_task": row_folder}, older).image_config is None  # the launcher reads the image

    with pytest.raises(StageError, match="outside the checkout"):
        write_staged(stage_for_launcher(prepared(task, build), build), out, tmp_path / "elsewhere")


def test_an_unreadable_or_foreign_staged_file_names_the_command_that_writes_it(tmp_path: Path):
    with pytest.raises(StackError, match="unreadable .* `veri tasks stage` writes it"):
        load_staged(tmp_path / "missing.json")
    (tmp_path / "old.json").write_text(json.dumps({"version": 0, "tasks": {}}))
    with pytest.raises(StackError, match="not a staged tasks file of version 1"):
        load_staged(tmp_path / "old.json")


@pytest.mark.parametrize("command", ["train", "eval"])
def test_harbor_tasks_given_are_read_not_built(command: str, checkout: Path, tmp_path: Path, monkeypatch):
    build, task = tmp_path / "build-tasks", checkout / "tasks" / DEMO.name
    out = tmp_path / "staged.json"
    write_staged(stage_for_launcher(prepared(task, build), build), out, checkout)
    monkeypatch.chdir(checkout)
    args = build_parser().parse_args([command, "job.yaml", "--sandbox", "launcher", "--harbor-tasks", str(out)])
    args.harbor_tasks = lambda *_: pytest.fail("the trainer container has no Docker: nothing may be built there")
    assert list(harbor_tasks_of(args, object())) == [str(task.resolve())]
