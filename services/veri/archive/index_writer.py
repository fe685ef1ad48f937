"""The trainer's side of index.sqlite (schema: index.py): one connection, a commit per row, and the index
brought in line with the files (`sync`, `rebuild_index`)."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veri.archive.index import BUSY_TIMEOUT_MS, COLUMNS, SCHEMA, SCHEMA_VERSION, index_row, read_rollout
from veri.archive.layout import ArchiveLayout, read_metrics


class IndexWriter:
    """The trainer's connection to index.sqlite."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
        # INSERT OR REPLACE deletes the old row without firing delete triggers unless this is on, which
        # would leave the replaced answer in the full-text index
        self.db.execute("PRAGMA recursive_triggers = ON")
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, SCHEMA_VERSION):
            raise sqlite3.DatabaseError(f"index schema version {version}, this veri writes {SCHEMA_VERSION}")
        self.db.executescript(SCHEMA)
        self.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        self.db.commit()

    def upsert_rollout(self, row: dict[str, Any]) -> None:
        placeholders = ", ".join("?" for _ in COLUMNS)
        with self.db:
            self.db.execute(
                f"INSERT OR REPLACE INTO rollouts ({', '.join(COLUMNS)}) VALUES ({placeholders})",
                [row[column] for column in COLUMNS],
            )

    def upsert_step(self, step: int, metrics: dict[str, Any]) -> None:
        with self.db:
            self.db.execute("INSERT OR REPLACE INTO steps (step, metrics) VALUES (?, ?)", (step, json.dumps(metrics)))

    def drop_steps_after(self, step: int) -> None:
        with self.db:
            self.db.execute("DELETE FROM rollouts WHERE step > ?", (step,))
            self.db.execute("DELETE FROM steps WHERE step > ?", (step,))

    def sync(self, layout: ArchiveLayout) -> IndexReport:
        """Bring the index in line with the files: index rollout files it lacks, drop rows whose file is gone,
        and replace the steps table with metrics.jsonl. Rows of files already indexed are kept as they are."""
        report = IndexReport()
        indexed = {path for (path,) in self.db.execute("SELECT path FROM rollouts")}
        on_disk = {}
        for step, file in layout.rollout_files():
            on_disk[layout.relative(file)] = (step, file)
        with self.db:
            for path in indexed - set(on_disk):
                self.db.execute("DELETE FROM rollouts WHERE path = ?", (path,))
                report.dropped.append(path)
        for path in sorted(set(on_disk) - indexed):
            step, file = on_disk[path]
            try:
                record = read_rollout(file)
            except (OSError, ValueError) as error:
                report.unreadable.append(f"{path}: {error}")
                continue
            self.upsert_rollout(index_row(step, record, path))
            report.added.append(path)
        report.rollouts = len(on_disk) - len(report.unreadable)
        with self.db:
            self.db.execute("DELETE FROM steps")
            for line in read_metrics(layout.metrics):
                self.db.execute("INSERT INTO steps (step, metrics) VALUES (?, ?)", (line["step"], json.dumps(line)))
                report.steps += 1
        return report

    def close(self) -> None:
        self.db.close()


@dataclass
class IndexReport:
    rollouts: int = 0  # rollout rows the index holds from the files
    steps: int = 0  # completed steps (metrics lines)
    added: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)  # "path: error" of files that do not parse


def rebuild_index(archive_dir: Path) -> IndexReport:
    """Regenerate index.sqlite of a job's archive folder from its files alone (the files are the truth).

    Builds a fresh database beside the old one and swaps it in, so a reader never sees a half-built index.
    Do not run it while a trainer is writing the same archive.
    """
    layout = ArchiveLayout(Path(archive_dir))
    fresh = layout.index.with_name(f".{layout.index.name}.rebuild.tmp")
    for leftover in (fresh, fresh.with_name(fresh.name + "-journal")):
        leftover.unlink(missing_ok=True)
    writer = IndexWriter(fresh)
    try:
        report = writer.sync(layout)
    finally:
        writer.close()
    fresh.replace(layout.index)
    return report
