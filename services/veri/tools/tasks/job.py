"""A job's Harbor tasks, resolved once where `veri train` and `veri eval` start (veri/cli.py hands this
function to their commands, so the loop and the trainer import nothing from tools/): each task's image
built (cached), the bundle image's runtime tree, the verifier's tools, the bundle's entrypoint rewritten
for the tree. The result is the plain mapping LaunchSettings.harbor_tasks carries; for the stack's launcher,
with each task's tests staged where that container reads them (tools/tasks/stage.py)."""

from __future__ import annotations

import sys
from typing import Any

from veri.core.config import JobConfig
from veri.core.harness import load_manifest
from veri.loop.collect.errors import StackError
from veri.services.launcher.task_runtime.layout import default_vendor_dir
from veri.services.launcher.task_runtime.runtime import RuntimeTreeError
from veri.tools.tasks.build import TaskBuildError
from veri.tools.tasks.prepare import prepare_tasks
from veri.tools.tasks.stage import StageError, stage_for_launcher
from veri.validation.harbor_checks import harbor_folders


class _BuildLines:
    """A job's start names what it built, and only counts what was already built: a job of many tasks
    starts with one line, not one per task (`veri tasks build` still prints every task)."""

    def __init__(self) -> None:
        self.up_to_date = 0

    def __call__(self, line: str) -> None:
        if line.endswith(" is up to date"):
            self.up_to_date += 1
        else:
            print(line, file=sys.stderr)

    def summary(self, tasks: int) -> None:
        print(f"tasks: {tasks} Harbor task{'s' if tasks != 1 else ''} ready ({self.up_to_date} image"
              f"{'s' if self.up_to_date != 1 else ''} already built, the rest built above)", file=sys.stderr)


def job_harbor_tasks(config: JobConfig, sandbox: str, image: str | None) -> dict[str, dict[str, Any]]:
    """{} for a job without Harbor tasks; else each task folder's launch inputs. Raises StackError with the fix."""
    folders = list(dict.fromkeys(folder for _, folder in harbor_folders(config)))
    if not folders:
        return {}
    if sandbox == "local":
        raise StackError("Harbor tasks run in their own image, with a verifier: --sandbox docker (or the stack's "
                         "launcher on its docker backend), not local")
    if not image:
        raise StackError("Harbor tasks need the bundle's image (its runtime tree is mounted in each task): --image")
    lines = _BuildLines()
    try:
        prepared = prepare_tasks(folders, default_vendor_dir(), image_map=config.image_map, runtime_image=image,
                                 entrypoint=load_manifest(config.harness_bundle).entrypoint, log=lines)
        lines.summary(len(folders))
        # the launcher service reads tests/ in its own container: from the tasks build folder it mounts
        return stage_for_launcher(prepared) if sandbox == "launcher" else prepared
    except (TaskBuildError, RuntimeTreeError, StageError) as error:
        raise StackError(f"the job's Harbor tasks could not be prepared: {error}") from None
