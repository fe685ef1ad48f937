"""`veri tasks check PATH...`: every task under each path read and checked, one line per task (`ok`, or its
problems with their fixes), warnings (ignored keys, test.sh lines the offline verifier cannot serve) under
it; exit 1 when any task has a problem. The same checks `veri validate` runs on a job's `dataset: {harbor:}`."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from veri.core.harbor_task import check_task, find_tasks, load_task, task_notes
from veri.core.problems import Problem, ProblemsError


def check_paths(paths: Iterable[Path], out: TextIO | None = None) -> int:
    """Print the report (to stdout unless `out`); 0 when every task is runnable, 1 otherwise."""
    out = out or sys.stdout
    ok = bad = 0
    for path in paths:
        try:
            folders = find_tasks(path)
        except ProblemsError as error:
            _print_problems(f"{path}: not a task", error.problems, out)
            bad += 1
            continue
        for folder in folders:
            problems, notes = _check_folder(folder)
            if problems:
                _print_problems(f"{folder}: {len(problems)} problem{'s' if len(problems) != 1 else ''}",
                                problems, out)
                bad += 1
            else:
                print(f"{folder}: ok", file=out)
                ok += 1
            for note in notes:
                print(f"  warning: {note}", file=out)
    print(f"{ok + bad} task{'s' if ok + bad != 1 else ''}: {ok} ok, {bad} with problems", file=out)
    return 1 if bad else 0


def _check_folder(folder: Path) -> tuple[list[Problem], list[str]]:
    try:
        task = load_task(folder)
    except ProblemsError as error:
        return error.problems, []
    return check_task(task), task_notes(task)


def _print_problems(head: str, problems: list[Problem], out: TextIO) -> None:
    print(head, file=out)
    for problem in problems:
        print(f"  problem: {problem}", file=out)
