"""The task folders a `veri tasks build|vendor PATH...` command means: PATH itself when it holds
environment/Dockerfile, else the task folders under it as `veri tasks check` finds them (PATH/*/,
PATH/tasks/*/). A task with a prebuilt `docker_image` and no Dockerfile has nothing to build or vendor."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from veri.core.harbor_task import find_tasks
from veri.core.problems import ProblemsError

DOCKERFILE = Path("environment") / "Dockerfile"


class NoTasksError(ValueError):
    """A PATH that is no task folder and holds none; the message names the fix."""


def task_folders(paths: Iterable[Path]) -> list[Path]:
    found: list[Path] = []
    for path in paths:
        if (path / DOCKERFILE).is_file():
            folders = [path]
        else:
            try:
                folders = [task for task in find_tasks(path) if (task / DOCKERFILE).is_file()]
            except ProblemsError:
                folders = []
            if not folders:
                raise NoTasksError(f"{path}: no {DOCKERFILE} here nor in a task folder under it: point at a task "
                                   f"folder (with {DOCKERFILE}) or a folder of them")
        found += [folder for folder in folders if folder not in found]
    return found
