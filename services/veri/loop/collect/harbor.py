"""A dataset row of a Harbor task (core/dataset.py `harbor_row`: its folder in TASK_DIR_COLUMN) as the
launch's task environment: the task's image and the runtime/tool trees, resolved once at the job's start
(tools/tasks/prepare.py, handed down as a plain mapping), the bundle's command rewritten for the tree.
Through the stack, the host resolves them before the trainer container starts (`veri tasks stage`) and the
container reads the staged file (`load_staged`)."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from veri.core.harbor_task import TASK_DIR_COLUMN, HarborTask, load_task
from veri.core.launch import TaskEnvironment, TaskImageConfig, task_environment
from veri.loop.collect.errors import StackError

# The staged file (`veri tasks stage`, tools/tasks/stage.py writes it): {"version", "tasks": {folder relative
# to the checkout: {"image", "tools_dir", "runtime_tree", "harness_command", "tests_dir", "solution_dir"}}}.
STAGED_VERSION = 1


class HarborTaskNotPrepared(StackError):
    """A row names a task folder the job's start did not build; the message says so."""


def load_staged(path: Path, checkout: Path | None = None) -> dict[str, dict[str, Any]]:
    """The staged file as LaunchSettings.harbor_tasks: keys resolved against `checkout` (default: the working
    folder, which is the checkout in the trainer container)."""
    try:
        staged = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise HarborTaskNotPrepared(f"--harbor-tasks {path}: unreadable ({error}); `veri tasks stage` writes it "
                                    "(make train runs it)") from None
    if not isinstance(staged, dict) or staged.get("version") != STAGED_VERSION:
        raise HarborTaskNotPrepared(f"--harbor-tasks {path}: not a staged tasks file of version {STAGED_VERSION}: "
                                    "stage the job again with this veri (`veri tasks stage`, make train runs it)")
    root = (checkout or Path.cwd()).resolve()
    return {str((root / folder).resolve()): dict(entry) for folder, entry in staged["tasks"].items()}


def _image_config(prepared: Mapping[str, Any]) -> TaskImageConfig | None:
    found = prepared.get("image_config")  # absent from a file staged before it was recorded
    return None if found is None else TaskImageConfig.model_validate(found)


@functools.lru_cache(maxsize=4096)
def _task(folder: str) -> HarborTask:
    return load_task(Path(folder))


def task_env_for(row: Mapping[str, Any], harbor_tasks: Mapping[str, Mapping[str, Any]]) -> TaskEnvironment | None:
    """None for a row that is no Harbor task; else its environment, with the agent the bundle's harness (its
    [agent] timeout_sec is capped by the launch's timeout_s: the launcher takes the smaller)."""
    folder = row.get(TASK_DIR_COLUMN)
    if not folder:
        return None
    prepared = harbor_tasks.get(str(folder))
    if prepared is None:
        raise HarborTaskNotPrepared(f"the task {folder} was not built at the job's start (its image, runtime tree "
                                    "and verifier tools are resolved there): a dataset row names a folder outside "
                                    "dataset.harbor, or the job was started without them")
    env = task_environment(_task(str(folder)), image=prepared["image"], agent="harness",
                           harness_command=list(prepared["harness_command"]),
                           runtime_tree=prepared.get("runtime_tree"), tools_dir=prepared.get("tools_dir"),
                           image_config=_image_config(prepared))
    # staged for the stack's launcher: its copy of tests/, where that container reads it
    return env.model_copy(update={"tests_dir": prepared["tests_dir"]}) if prepared.get("tests_dir") else env
