"""The job's dataset: a JSONL file, one task per line, with a `prompt` and any other columns; or a folder of
Harbor task folders (`harbor: DIR`), one row per task (core/harbor_task.py).

`column_mapping` renames the file's columns ({"question": "prompt"}); the renamed row is what the
harness gets as VERI_TASK and what reward functions get as keyword columns. Each row is one GRPO group's task.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from veri.core import harbor_task
from veri.core.problems import Problem, ProblemsError

PROMPT = "prompt"
_MAX_LINE_PROBLEMS = 5


class DatasetConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: Path | None = Field(
        default=None,
        description="JSONL file: one JSON object per line, with a `prompt` (text or messages); or set `harbor`",
    )
    harbor: Path | None = Field(
        default=None,
        description="a Harbor task folder, or a folder of them (DIR/*/task.toml, DIR/tasks/*/task.toml): one row"
        f" per task: `prompt` = instruction.md, `{harbor_task.TASK_NAME_COLUMN}`, the [metadata] keys,"
        f" `{harbor_task.TASK_DIR_COLUMN}` = the folder (docs/harbor-tasks.md)",
    )
    column_mapping: dict[str, str] = Field(
        default_factory=dict, description="rename the file's columns: {file column: name veri uses}"
    )

    @model_validator(mode="after")
    def _one_source(self) -> DatasetConfig:
        if (self.path is None) == (self.harbor is None):
            said = "both `path` and `harbor` are set" if self.path is not None else "neither `path` nor `harbor` is set"
            raise ValueError(f"{said}; give one: `path: tasks.jsonl` (JSONL) or `harbor: DIR` (Harbor task folders)")
        return self

    @property
    def source(self) -> Path:
        """The file or folder the rows come from."""
        source = self.path if self.path is not None else self.harbor
        assert source is not None  # _one_source
        return source


def read_dataset(spec: DatasetConfig) -> list[dict[str, Any]]:
    """Every row, renamed; raises `ProblemsError` listing the bad lines (the first few), or every problem of
    every Harbor task, at once."""
    if spec.harbor is not None:
        return read_harbor_tasks(spec)
    assert spec.path is not None  # _one_source
    where = "dataset.path"
    if not spec.path.is_file():
        fix = "create it, or set dataset.path to a JSONL file (relative paths start where you run veri)"
        raise ProblemsError(str(spec.path), [Problem(where, f"{spec.path} does not exist", fix)])
    rows: list[dict[str, Any]] = []
    problems: list[Problem] = []
    with spec.path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            row, problem = _parse_line(line, number, spec)
            if problem:
                problems.append(problem)
            else:
                rows.append(row)
    if len(problems) > _MAX_LINE_PROBLEMS:
        extra = len(problems) - _MAX_LINE_PROBLEMS
        problems = [*problems[:_MAX_LINE_PROBLEMS], Problem(where, f"... and {extra} more bad lines", "fix them too")]
    if not rows and not problems:
        problems.append(Problem(where, f"{spec.path} has no rows", "add one JSON object per line"))
    if problems:
        raise ProblemsError(str(spec.path), problems)
    return rows


def read_harbor_tasks(spec: DatasetConfig) -> list[dict[str, Any]]:
    """One row per runnable task; raises `ProblemsError` with every task's problems (check_task) at once."""
    assert spec.harbor is not None
    checked = harbor_task.check_tasks(spec.harbor)
    if checked.problems:
        raise ProblemsError(str(spec.harbor), [_in_dataset(problem) for problem in checked.problems])
    names = [task.name for task in checked.tasks]
    if twice := sorted({name for name in names if names.count(name) > 1}):
        raise ProblemsError(str(spec.harbor), [Problem("dataset.harbor", f"two tasks are named {twice[0]!r}",
                                                       "give each task its own [task] name")])
    return [rename_columns(harbor_row(task), spec.column_mapping) for task in checked.tasks]


def harbor_row(task: harbor_task.HarborTask) -> dict[str, Any]:
    """A task as a dataset row: its instruction as the prompt, its name, its [metadata] keys (prefixed
    `metadata_` where one would shadow a column of veri's) and its folder."""
    own = {PROMPT: task.instruction, harbor_task.TASK_NAME_COLUMN: task.name,
           harbor_task.TASK_DIR_COLUMN: str(task.folder.resolve())}
    metadata = {(f"metadata_{key}" if key in own else key): value for key, value in task.config.metadata.items()}
    return {**metadata, **own}


def _in_dataset(problem: Problem) -> Problem:
    return Problem(f"dataset.harbor: {problem.where}", problem.message, problem.fix)


def rename_columns(row: dict[str, Any], mapping: dict[str, str]) -> dict[str, Any]:
    return {mapping.get(key, key): value for key, value in row.items()}


def _parse_line(line: str, number: int, spec: DatasetConfig) -> tuple[dict[str, Any], Problem | None]:
    where = f"dataset.path line {number}"
    try:
        row = json.loads(line)
    except ValueError as error:
        return {}, Problem(where, f"is not JSON ({error})", "write one JSON object per line")
    if not isinstance(row, dict):
        return {}, Problem(where, f"is a {type(row).__name__}, not an object", "write one JSON object per line")
    renamed = rename_columns(row, spec.column_mapping)
    if len(renamed) < len(row):
        return {}, Problem(
            where, "two columns get the same name after dataset.column_mapping", "rename to distinct names"
        )
    if PROMPT not in renamed:
        sources = [key for key, target in spec.column_mapping.items() if target == PROMPT]
        fix = (
            f"the mapped column {sources[0]!r} is missing from this row"
            if sources
            else f"add a `prompt`, or map a column to it with dataset.column_mapping: {{<column>: prompt}}"
            f" (its columns: {sorted(row)})"
        )
        return {}, Problem(where, "has no `prompt`", fix)
    return renamed, None
