"""A dataset row of a Harbor task (core/dataset.py `harbor_row`: its folder in TASK_DIR_COLUMN) as the
launch's task environment: the task's image and the runtime/tool trees, resolved once at the job's start
(tools/tasks/prepare.py, handed down as a plain mapping), the bundle's command rewritten for the tree."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from veri.core.harbor_task import TASK_DIR_COLUMN, HarborTask, load_task
from veri.core.launch import TaskEnvironment, task_environment


class HarborTaskNotPrepared(RuntimeError):
    """A row names a task folder the job's start did not build; the message says so."""


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
    return task_environment(_task(str(folder)), image=prepared["image"], agent="harness",
                            harness_command=list(prepared["harness_command"]),
                            runtime_tree=prepared.get("runtime_tree"), tools_dir=prepared.get("tools_dir"))
