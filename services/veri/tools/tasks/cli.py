"""`veri tasks ...`: Harbor task folders (docs/harbor-tasks.md). Import-light: each command's work is in its
own module, imported when it runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


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


def _check(args: argparse.Namespace) -> int:
    from veri.tools.tasks.check import check_paths

    return check_paths(args.paths)



def _build(args: argparse.Namespace) -> int:
    from veri.tools.tasks.build import TaskBuildError, build_tasks, parse_image_map
    from veri.tools.tasks.folders import NoTasksError, task_folders
    from veri.tools.tasks.layout import default_vendor_dir

    try:
        tags = build_tasks(task_folders(args.paths), args.vendor or default_vendor_dir(),
                           image_map=parse_image_map(args.image_map), prefix=args.prefix)
    except (TaskBuildError, NoTasksError) as error:
        print(f"veri tasks build: {error}", file=sys.stderr)
        return 2
    for task, tag in tags.items():
        print(f"{task} {tag}")
    return 0


def _vendor(args: argparse.Namespace) -> int:
    from veri.tools.tasks.folders import NoTasksError, task_folders
    from veri.tools.tasks.layout import default_vendor_dir
    from veri.tools.tasks.vendor import VendorError, vendor_tasks

    out = args.out or default_vendor_dir()
    try:
        vendor_tasks(task_folders(args.paths), out, base_image=args.base_image)
    except (VendorError, NoTasksError) as error:
        print(f"veri tasks vendor: {error}", file=sys.stderr)
        return 2
    print(out)
    return 0
