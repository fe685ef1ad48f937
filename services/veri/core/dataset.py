"""The job's dataset: a JSONL file, one task per line, with a `prompt` and any other columns.

`column_mapping` renames the file's columns ({"question": "prompt"}); the renamed row is what the
harness gets as VERI_TASK and what reward functions get as keyword columns.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from veri.core.problems import Problem, ProblemsError

PROMPT = "prompt"
_MAX_LINE_PROBLEMS = 5


class DatasetConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: Path = Field(description="JSONL file: one JSON object per line, with a `prompt` (text or messages)")
    column_mapping: dict[str, str] = Field(
        default_factory=dict, description="rename the file's columns: {file column: name veri uses}"
    )


def read_dataset(spec: DatasetConfig) -> list[dict[str, Any]]:
    """Every row, renamed; raises `ProblemsError` listing the bad lines (the first few) at once."""
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
