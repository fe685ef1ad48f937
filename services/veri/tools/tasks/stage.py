"""A Harbor job's tasks made ready for the stack's launcher, on the host (`make train` / `make eval` run
`veri tasks stage` before the trainer container starts; that container has no Docker to build with).

The launcher service reads a task's tests/ (and solution/) and hands the runtime and tool trees to the
Docker daemon as bind mounts: every path it gets must hold in the launcher's container as on the host.
So everything lies under the tasks build folder (`VERI_TASKS_BUILD`, default build/tasks/), which
compose.yaml mounts into the launcher read-only at the same path: tests/ and solution/ are copied to
staged/<content hash>/ there (a copy also keeps a test edited mid-job from reaching half a job's rollouts).

The staged file, <state>/configs/<job>.tasks.json, is the mapping LaunchSettings.harbor_tasks carries,
keyed by each task folder relative to the checkout (the trainer's /work): `veri train --harbor-tasks`
reads it there (loop/collect/harbor.py `load_staged`)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from veri.loop.collect.harbor import STAGED_VERSION
from veri.services.launcher.task_runtime.layout import default_build_dir

STAGED_SUFFIX = ".tasks.json"
STAGED_PARTS = ("tests", "solution")  # the verifier's folder; the oracle's (veri tasks oracle)


class StageError(RuntimeError):
    """A task cannot be staged where the launcher reads it; the message names the fix."""


def _digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for part in STAGED_PARTS:
        root = folder / part
        for path in sorted(root.rglob("*")) if root.is_dir() else []:
            if path.is_file() and not path.is_symlink():
                digest.update(f"{path.relative_to(folder)}\0{path.stat().st_mode & 0o777:o}\0".encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()[:20]


def stage_task_files(folder: Path, build_dir: Path | None = None) -> dict[str, str | None]:
    """Copy the task's tests/ and solution/ to <build>/staged/<hash>/ (once per content); their new paths
    ("tests_dir", "solution_dir": None without one). Files only: a symlink in tests/ is refused, since the
    launcher would follow it out of the staged tree."""
    for part in STAGED_PARTS:
        links = [p for p in (folder / part).rglob("*") if p.is_symlink()] if (folder / part).is_dir() else []
        if links:
            raise StageError(f"{folder}: {links[0].relative_to(folder)} is a symbolic link: a task's {part}/ is "
                             "copied for the launcher as files; replace the link with the file")
    out = (build_dir or default_build_dir()) / "staged" / _digest(folder)
    if not (out / ".complete").is_file():
        partial = out.with_name(f".{out.name}.{os.getpid()}")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        for part in STAGED_PARTS:
            if (folder / part).is_dir():
                shutil.copytree(folder / part, partial / part)
        (partial / ".complete").write_text(str(folder))
        partial.chmod(0o755)
        shutil.rmtree(out, ignore_errors=True)
        partial.rename(out)
    return {"tests_dir": str(out / "tests"),
            "solution_dir": str(out / "solution") if (out / "solution").is_dir() else None}


def stage_for_launcher(prepared: dict[str, dict[str, Any]], build_dir: Path | None = None) -> dict[str, dict[str, Any]]:
    """`prepared` (tools/tasks/prepare.py, keyed by task folder) with each task's files staged and every path
    checked to lie under the tasks build folder the launcher mounts."""
    build = (build_dir or default_build_dir()).resolve()
    staged = {}
    for folder, paths in prepared.items():
        entry = {**paths, **stage_task_files(Path(folder), build)}
        for key in ("runtime_tree", "tools_dir", "tests_dir", "solution_dir"):
            value = entry.get(key)
            if value and not Path(value).resolve().is_relative_to(build):
                raise StageError(f"{folder}: its {key} {value} is outside the tasks build folder {build}, the one "
                                 "the launcher container mounts: unset VERI_TASKS_BUILD, or set it the same for "
                                 "`make up` and this command")
        staged[folder] = entry
    return staged


def write_staged(staged: dict[str, dict[str, Any]], out: Path, checkout: Path) -> None:
    """The staged mapping, keyed relative to the checkout, readable by the trainer container's user."""
    checkout = checkout.resolve()
    tasks = {}
    for folder, entry in staged.items():
        path = Path(folder).resolve()
        if not path.is_relative_to(checkout):
            raise StageError(f"the task {folder} is outside the checkout {checkout}, the one folder the trainer "
                             "container sees: move it into the checkout (config/data/ holds the shipped tasks)")
        tasks[str(path.relative_to(checkout))] = entry
    out.parent.mkdir(parents=True, exist_ok=True)
    out.parent.chmod(0o755)
    temporary = out.with_name(f".{out.name}.tmp")
    temporary.write_text(json.dumps({"version": STAGED_VERSION, "tasks": tasks}, indent=1), encoding="utf-8")
    temporary.chmod(0o644)
    temporary.replace(out)
