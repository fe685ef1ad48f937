"""`veri tasks ...`: Harbor task folders (docs/harbor-tasks.md). Import-light: each command's work is in its
own module, imported when it runs."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(commands: argparse._SubParsersAction) -> None:
    tasks = commands.add_parser("tasks", help="Harbor task folders: check them before a job trains on them")
    kinds = tasks.add_subparsers(dest="tasks_command", required=True, metavar="COMMAND")
    check = kinds.add_parser("check", help="one line per task: ok, or what veri refuses and the fix; warnings name"
                                           " what veri ignores and the test.sh lines it cannot serve offline")
    check.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                       help="a task folder (task.toml, instruction.md, the verifier's test.sh) or a folder of them")
    check.set_defaults(func=_check)


def _check(args: argparse.Namespace) -> int:
    from veri.tools.tasks.check import check_paths

    return check_paths(args.paths)
