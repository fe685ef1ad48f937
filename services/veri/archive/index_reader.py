"""The console's side of index.sqlite (schema: index.py): read-only queries, so a read-only archive mount
works; an index of another schema version is refused with the fix (rebuild it from the files)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any, Self

from veri.archive.index import BUSY_TIMEOUT_MS, SCHEMA_VERSION, read_rollout
from veri.archive.index_query import RolloutQuery
from veri.archive.layout import ArchiveLayout, read_metrics
from veri.core.rollout_record import RolloutRecord


class ArchiveIndex:
    """Read-only queries over a job archive, for the console. Rows are dicts; `verdicts` is a list of rule
    names, `trainable` a bool; `path` is relative to the archive folder (pass it to `read_rollout`)."""

    def __init__(self, archive_dir: Path) -> None:
        self.layout = ArchiveLayout(Path(archive_dir).resolve())
        if not self.layout.index.is_file():
            raise FileNotFoundError(f"no archive index at {self.layout.index} (the trainer creates it)")
        uri = f"{self.layout.index.as_uri()}?mode=ro"
        self.db = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
        self.db.row_factory = sqlite3.Row
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            self.db.close()
            raise IndexOutdated(
                f"{self.layout.index} has index schema {version}, this veri reads {SCHEMA_VERSION}: rebuild it"
                f" from the files (python -m veri.archive.index {self.layout.dir}), or resume the job"
                " (the trainer rebuilds it)"
            )

    def list_steps(self) -> list[dict[str, Any]]:
        """Every step with rollouts or metrics, ascending: {step, complete, rollouts, metrics (None until
        the step completes)}. The step in progress shows up with complete False."""
        steps: dict[int, dict[str, Any]] = {}
        for step, count in self.db.execute("SELECT step, COUNT(*) FROM rollouts GROUP BY step"):
            steps[step] = {"step": step, "complete": False, "rollouts": count, "metrics": None}
        for step, metrics in self.db.execute("SELECT step, metrics FROM steps"):
            entry = steps.setdefault(step, {"step": step, "rollouts": 0})
            entry |= {"complete": True, "metrics": json.loads(metrics)}
        return [steps[step] for step in sorted(steps)]

    def recent_metrics(self, steps: int) -> list[dict[str, Any]]:
        """The metrics lines of the last `steps` completed steps, ascending (without reading metrics.jsonl)."""
        rows = self.db.execute("SELECT metrics FROM steps ORDER BY step DESC LIMIT ?", (steps,)).fetchall()
        return [json.loads(metrics) for (metrics,) in reversed(rows)]

    def rollouts(
        self,
        step: int | None = None,
        status: str | None = None,
        rule: str | None = None,
        limit: int = 100,
        offset: int = 0,
        *,
        trainable: bool | None = None,
    ) -> list[dict[str, Any]]:
        """Index rows, filtered (rule: rollouts where that rule fired), ordered by step, task, rollout."""
        query = RolloutQuery(step_min=step, step_max=step, status=status, rule=rule, trainable=trainable)
        return self.search(query, limit, offset)

    def count_rollouts(
        self, step: int | None = None, status: str | None = None, rule: str | None = None, *,
        trainable: bool | None = None,
    ) -> int:
        return self.count(RolloutQuery(step_min=step, step_max=step, status=status, rule=rule, trainable=trainable))

    def search(self, query: RolloutQuery, limit: int = 100, offset: int = 0) -> list[dict[str, Any]]:
        """One page of index rows matching `query`, in its order."""
        where, params = query.where()
        sql = f"SELECT * FROM rollouts{where} ORDER BY {query.order_by()} LIMIT ? OFFSET ?"
        return [_row(row) for row in self.db.execute(sql, [*params, limit, offset])]

    def search_page(self, query: RolloutQuery, limit: int = 100, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
        """One page of `search` and how many rows match in all. (Two queries: counting through a window
        function in the same pass measured slower, as it reads every matching row.)"""
        return self.search(query, limit, offset), self.count(query)

    def steps_with_rollouts(self) -> list[int]:
        return [step for (step,) in self.db.execute("SELECT DISTINCT step FROM rollouts ORDER BY step")]

    def count(self, query: RolloutQuery) -> int:
        where, params = query.where()
        return self.db.execute(f"SELECT COUNT(*) FROM rollouts{where}", params).fetchone()[0]

    def find(self, step: int, task_index: int, rollout_index: int) -> dict[str, Any] | None:
        """The row of one rollout (None when the index has no such rollout)."""
        row = self.db.execute("SELECT * FROM rollouts WHERE step = ? AND task_index = ? AND rollout_index = ?",
                              (step, task_index, rollout_index)).fetchone()
        return _row(row) if row else None

    def step_range(self) -> tuple[int, int] | None:
        """The lowest and highest step with rollouts (None: no rollouts yet)."""
        low, high = self.db.execute("SELECT MIN(step), MAX(step) FROM rollouts").fetchone()
        return None if low is None else (low, high)

    def task_indexes(self) -> list[int]:
        return [task for (task,) in self.db.execute("SELECT DISTINCT task_index FROM rollouts ORDER BY task_index")]

    def read_rollout(self, path: str | Path) -> RolloutRecord:
        """The record at an index row's `path`; refuses a path outside the archive folder."""
        return read_rollout(self.layout.inside(path))

    def metrics(self) -> list[dict[str, Any]]:
        """Every completed step's metrics line, from metrics.jsonl (the source of truth), ascending."""
        return read_metrics(self.layout.metrics)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class IndexOutdated(sqlite3.DatabaseError):
    """index.sqlite was written by another schema version (rebuild it from the files)."""


def _row(row: sqlite3.Row) -> dict[str, Any]:
    item = dict(row)
    item["trainable"] = bool(item["trainable"])
    item["verdicts"] = item["verdicts"].split(",") if item["verdicts"] else []
    return item
