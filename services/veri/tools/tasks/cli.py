"""`veri tasks ...`: Harbor task folders (docs/harbor-tasks.md). Import-light: each command's work is in its
own module, imported when it runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(commands: argparse._SubParsersAction) -> None:
    tasks = commands.add_parser("tasks", help="Harbor task folders: check them, vendor and build their images offline")
    kinds = tasks.add_subparsers(dest="tasks_command", required=True, metavar="COMMAND")
    check = kinds.add_parser("check", help="one line per task: ok, or what veri refuses and the fix; warnings name"
                                           " what veri ignores and the test.sh lines it cannot serve offline")
    check.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                       help="a task folder (task.toml, instruction.md, the verifier's test.sh) or a folder of them")
    check.set_defaults(func=_check)
    build = kinds.add_parser(
        "build", help="build each task's environment/Dockerfile offline (FROM lines mapped, apt and pip served "
                      "from vendor/tasks/); prints one 'TASK TAG' line each",
        description="Build the image of each task folder (a folder with environment/Dockerfile) with no "
                    "registry and no internet: the FROM lines are mapped with --image-map, apt and pip are "
                    "answered by veri's build proxy from vendor/tasks/ (`veri tasks vendor`). The tag "
                    "veri/task-<name>:<content hash> covers environment/, the map and the vendored inputs: "
                    "an unchanged task is not rebuilt.")
    build.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                       help="a task folder (environment/Dockerfile) or a folder of them")
    build.add_argument("--image-map", action="append", default=[], metavar="FROM=LOCAL",
                       help="build on LOCAL where a Dockerfile says FROM (repeatable), e.g. "
                            "ubuntu:24.04=veri/task-os-base (Debian bookworm that veri builds from veri/os-base)")
    build.add_argument("--vendor", type=Path, default=None, help="vendored inputs (default: vendor/tasks/)")
    build.add_argument("--prefix", default="veri", help="image name prefix (default: veri)")
    build.set_defaults(func=_build)
    oracle = kinds.add_parser(
        "oracle", help="run each task's solution/solve.sh as the agent (or nothing: --agent nop) in its sandbox "
                       "under runsc, then its tests; one line per task with its reward",
        description="Build each task's image (cached, as `veri tasks build`), run solution/solve.sh as the "
                    "agent through the docker backend's task sandbox (runsc), then the task's tests by the "
                    "verifier, as training does. Exits 1 when a task's oracle scores below 1 (every reward.json "
                    "key counts) or its verification failed, saying why; with --agent nop the tests must run "
                    "(a nop scoring above 0 is a warning: the tests check too little).")
    oracle.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                        help="a task folder (environment/Dockerfile) or a folder of them")
    oracle.add_argument("--agent", choices=["oracle", "nop"], default="oracle",
                        help="oracle: the task's solution/solve.sh (default); nop: nothing")
    oracle.add_argument("--image-map", action="append", default=[], metavar="FROM=LOCAL",
                        help="build on LOCAL where a Dockerfile says FROM (repeatable), as `veri tasks build`")
    oracle.add_argument("--vendor", type=Path, default=None, help="vendored inputs (default: vendor/tasks/)")
    oracle.add_argument("--runtime-image", default="veri/base",
                        help="the image whose runtime tree is mounted at /veri/rt (the verifier's uv runs its "
                             "Python; default veri/base)")
    oracle.add_argument("--parallel", type=int, default=4, help="tasks run at once (default 4)")
    oracle.set_defaults(func=_oracle)
    vendor = kinds.add_parser(
        "vendor", help="download (online, once) what the tasks' builds and verifiers fetch into vendor/tasks/",
        description="Read each task's <task>/environment/Dockerfile (apt-get install, pip install X==V) and "
                    "<task>/tests/test.sh (uvx --with X==V, pip install X==V) and download into vendor/tasks/: the "
                    ".debs with their recommends, Debian's signed indexes, the wheels, and the verifier's uv. "
                    "Copy vendor/ with the tree to an air-gapped machine.")
    vendor.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                        help="a task folder (environment/Dockerfile) or a folder of them")
    vendor.add_argument("--out", type=Path, default=None, help="where (default: vendor/tasks/)")
    vendor.add_argument("--base-image", default="veri/os-base",
                        help="the image the tasks build on: the .debs it already has are not fetched")
    vendor.set_defaults(func=_vendor)
    _register_stage(kinds)


def _register_stage(kinds: argparse._SubParsersAction) -> None:
    stage = kinds.add_parser(
        "stage", help="make a job's Harbor tasks ready for the stack's launcher (make train and make eval run it)",
        description="On the host, before the trainer container starts (it has no Docker): build each task's image "
                    "(cached), the bundle image's runtime tree and the verifier's tools, copy each task's tests/ "
                    "where the launcher container reads them, and write <state>/configs/NAME.tasks.json, which "
                    "`veri train --harbor-tasks` reads. Prints that file's path in the trainer container, or "
                    "nothing for a job without Harbor tasks.")
    stage.add_argument("config", type=Path, help="job file (.yaml or .toml)")
    stage.add_argument("--image", required=True, help="the harness bundle's image (`veri harness build`)")
    stage.add_argument("--name", required=True, help="the job's name (the staged file is NAME.tasks.json)")
    stage.add_argument("--state", type=Path, default=None, help="the stack's state folder (default $VERI_STATE_DIR or"
                                                                " build/state)")
    stage.set_defaults(func=_stage)


def job_harbor_tasks(config: Any, sandbox: str, image: str | None) -> dict[str, dict[str, Any]]:
    """`veri train` / `veri eval`: the job's Harbor tasks resolved at its start (tools/tasks/job.py; imported
    only when a command runs)."""
    from veri.tools.tasks.job import job_harbor_tasks as resolve

    return resolve(config, sandbox, image)


def _check(args: argparse.Namespace) -> int:
    from veri.tools.tasks.check import check_paths

    return check_paths(args.paths)



def _build(args: argparse.Namespace) -> int:
    from veri.services.launcher.task_runtime.layout import default_vendor_dir
    from veri.tools.tasks.build import TaskBuildError, build_tasks, parse_image_map
    from veri.tools.tasks.folders import NoTasksError, task_folders

    try:
        tags = build_tasks(task_folders(args.paths), args.vendor or default_vendor_dir(),
                           image_map=parse_image_map(args.image_map), prefix=args.prefix)
    except (TaskBuildError, NoTasksError) as error:
        print(f"veri tasks build: {error}", file=sys.stderr)
        return 2
    for task, tag in tags.items():
        print(f"{task} {tag}")
    return 0


def _oracle(args: argparse.Namespace) -> int:
    import logging

    from veri.infra.logging import configure_service_logging
    from veri.services.launcher.task_runtime.layout import default_vendor_dir
    from veri.services.launcher.task_runtime.runtime import RuntimeTreeError
    from veri.tools.tasks.build import TaskBuildError, parse_image_map
    from veri.tools.tasks.folders import NoTasksError, task_folders
    from veri.tools.tasks.oracle import run_oracle
    from veri.tools.tasks.prepare import prepare_tasks

    configure_service_logging("tasks", level=logging.WARNING)  # stdout is the report; the launcher's notes to stderr
    try:
        prepared = prepare_tasks(task_folders(args.paths), args.vendor or default_vendor_dir(),
                                 image_map=parse_image_map(args.image_map), runtime_image=args.runtime_image)
    except (TaskBuildError, NoTasksError, RuntimeTreeError) as error:
        print(f"veri tasks oracle: {error}", file=sys.stderr)
        return 2
    lines = run_oracle(prepared, agent=args.agent, max_parallel=args.parallel)
    for line in lines:
        print(line.text(args.agent))
    failed = [line.task for line in lines if not line.passed(args.agent)]
    print(f"{args.agent}: {len(lines) - len(failed)} of {len(lines)} tasks passed"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def _vendor(args: argparse.Namespace) -> int:
    from veri.services.launcher.task_runtime.layout import default_vendor_dir
    from veri.tools.tasks.folders import NoTasksError, task_folders
    from veri.tools.tasks.vendor import VendorError, vendor_tasks

    out = args.out or default_vendor_dir()
    try:
        vendor_tasks(task_folders(args.paths), out, base_image=args.base_image)
    except (VendorError, NoTasksError) as error:
        print(f"veri tasks vendor: {error}", file=sys.stderr)
        return 2
    print(out)
    return 0


def _stage(args: argparse.Namespace) -> int:
    from veri.core.config import parse_config, read_config_file
    from veri.core.problems import ProblemsError
    from veri.core.state import state_dir
    from veri.loop.collect.errors import StackError
    from veri.tools.appliance.stack_env import BASE_COMPOSE_PATH, JOB_FILES, JOB_FILES_IN_TRAINER
    from veri.tools.tasks.stage import STAGED_SUFFIX, StageError, write_staged

    try:  # `veri validate` ran before (make train): the paths and the image map are all this needs
        config = parse_config(read_config_file(args.config))
        staged = job_harbor_tasks(config, "launcher", args.image)
        if not staged:
            return 0
        name = f"{args.name}{STAGED_SUFFIX}"
        # keyed as the trainer container's /work sees the checkout compose.yaml mounts there
        write_staged(staged, (args.state or state_dir()) / JOB_FILES / name, BASE_COMPOSE_PATH.parent)
    except (StackError, StageError, ProblemsError) as error:
        print(f"veri tasks stage: {error}", file=sys.stderr)
        return 2
    print(JOB_FILES_IN_TRAINER / name)
    return 0
