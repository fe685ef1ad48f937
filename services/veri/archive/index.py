"""The archive's SQLite index (index.sqlite): what the console lists and filters. Rebuildable from the files.

    rollouts(step, task_index, rollout_index, rollout_id, status, reward, trainable, verdicts, turns,
             prompt_tokens, completion_tokens, environment_tokens, policy_version, policy_versions, path,
             final_answer)
        one row per trajectories/step-<N>/task-<M>/rollout-<K>.json; key (step, task_index, rollout_index)
        verdicts: the distinct rule names that fired, comma-separated in order ("" when none)
        turns: spans in the rollout; *_tokens: from the episode row (0 without a row; completion = sampled)
        policy_version: the highest version over its spans (NULL without spans); policy_versions: all, "3,4"
        path: the rollout file relative to the archive folder ("trajectories/step-0/task-1/rollout-2.json")
        final_answer: the text of the last span's reply (the first FINAL_ANSWER_CHARS), for text search
    answers(final_answer)
        FTS5 over rollouts.final_answer (external content: the text is stored once, in rollouts; triggers
        keep the index in step), trigram tokenizer, so a query is a substring, not a word: see RolloutQuery
    steps(step, metrics)
        one row per line of metrics.jsonl (metrics: that line's JSON): the completed steps

The trainer writes it (`IndexWriter`, one connection, a commit per row); the console reads it with
`ArchiveIndex`, which opens the database read-only, so a read-only archive mount works. The database
uses SQLite's default rollback journal (no WAL), because WAL needs a writable folder even to read.

Schema versions (PRAGMA user_version): 1 had no final_answer; 2 adds it and the indexes the console's
filters and sorts use; 3 adds the answers full-text index (2 scanned every row of the range for text).
The index is rebuilt from the files, never migrated: the trainer's `JobArchive`
rebuilds an older one when it opens the archive, `rebuild_index` does it by hand, and `ArchiveIndex`
refuses one it cannot read with that fix in the message.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from veri.archive.layout import ArchiveLayout, read_metrics
from veri.core.rollout_record import RolloutRecord

SCHEMA_VERSION = 3
FINAL_ANSWER_CHARS = 4000
BUSY_TIMEOUT_MS = 10_000
SCHEMA = """
CREATE TABLE IF NOT EXISTS rollouts (
    step INTEGER NOT NULL,
    task_index INTEGER NOT NULL,
    rollout_index INTEGER NOT NULL,
    rollout_id TEXT NOT NULL,
    status TEXT NOT NULL,
    reward REAL,
    trainable INTEGER NOT NULL,
    verdicts TEXT NOT NULL,
    turns INTEGER NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    environment_tokens INTEGER NOT NULL,
    policy_version INTEGER,
    policy_versions TEXT NOT NULL,
    path TEXT NOT NULL,
    final_answer TEXT NOT NULL,
    PRIMARY KEY (step, task_index, rollout_index)
);
CREATE INDEX IF NOT EXISTS rollouts_by_status ON rollouts (step, status);
CREATE INDEX IF NOT EXISTS rollouts_by_id ON rollouts (rollout_id);
CREATE INDEX IF NOT EXISTS rollouts_by_task ON rollouts (task_index, step);
CREATE INDEX IF NOT EXISTS rollouts_by_reward ON rollouts (step, reward);
CREATE TABLE IF NOT EXISTS steps (step INTEGER PRIMARY KEY, metrics TEXT NOT NULL);
CREATE VIRTUAL TABLE IF NOT EXISTS answers USING fts5(
    final_answer, content='rollouts', content_rowid='rowid', tokenize='trigram'
);
CREATE TRIGGER IF NOT EXISTS answers_after_insert AFTER INSERT ON rollouts BEGIN
    INSERT INTO answers (rowid, final_answer) VALUES (new.rowid, new.final_answer);
END;
CREATE TRIGGER IF NOT EXISTS answers_after_delete AFTER DELETE ON rollouts BEGIN
    INSERT INTO answers (answers, rowid, final_answer) VALUES ('delete', old.rowid, old.final_answer);
END;
CREATE TRIGGER IF NOT EXISTS answers_after_update AFTER UPDATE ON rollouts BEGIN
    INSERT INTO answers (answers, rowid, final_answer) VALUES ('delete', old.rowid, old.final_answer);
    INSERT INTO answers (rowid, final_answer) VALUES (new.rowid, new.final_answer);
END;
"""
COLUMNS = (
    "step", "task_index", "rollout_index", "rollout_id", "status", "reward", "trainable", "verdicts", "turns",
    "prompt_tokens", "completion_tokens", "environment_tokens", "policy_version", "policy_versions", "path",
    "final_answer",
)
TRIGRAM = 3  # characters: a shorter text cannot use the trigram index (it is matched by a scan)
# The orders the console offers: name -> ORDER BY (ties broken by position, so pages are stable).
SORTS = {
    "step": "step, task_index, rollout_index",
    "reward": "reward, step, task_index, rollout_index",
    "turns": "turns, step, task_index, rollout_index",
    "tokens": "completion_tokens, step, task_index, rollout_index",
    "task": "task_index, step, rollout_index",
}


def index_row(step: int, record: RolloutRecord, path: str) -> dict[str, Any]:
    """The index row of one rollout record (`path` relative to the archive folder)."""
    rules = list(dict.fromkeys(str(verdict.rule) for verdict in record.verdicts))
    row = record.episode.row
    sampled = sum(row.env_mask) if row else 0
    versions = sorted({span.policy_version for span in record.spans})
    return {
        "step": step,
        "task_index": record.task_index,
        "rollout_index": record.rollout_index,
        "rollout_id": record.rollout_id,
        "status": str(record.status),
        "reward": record.reward.reward if record.reward else None,
        "trainable": int(record.trainable),
        "verdicts": ",".join(rules),
        "turns": len(record.spans),
        "prompt_tokens": len(row.prompt_ids) if row else 0,
        "completion_tokens": sampled,
        "environment_tokens": len(row.env_mask) - sampled if row else 0,
        "policy_version": versions[-1] if versions else None,
        "policy_versions": ",".join(map(str, versions)),
        "path": path,
        "final_answer": final_answer(record)[:FINAL_ANSWER_CHARS],
    }


def final_answer(record: RolloutRecord) -> str:
    """The text of the rollout's last model reply ('' without spans, or when it was only tool calls)."""
    if not record.spans:
        return ""
    content = record.spans[-1].reply_message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def read_rollout(path: Path) -> RolloutRecord:
    """One archived rollout file as a `RolloutRecord`."""
    return RolloutRecord.model_validate_json(Path(path).read_bytes())


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


@dataclass(frozen=True)
class RolloutQuery:
    """Which rollouts, and in what order. Every field is optional; bounds are inclusive.

    rule: rollouts where that rule fired; sort: a key of SORTS.
    text: a substring of the final answer (its first FINAL_ANSWER_CHARS), case-insensitive, spaces and
    punctuation included as typed ("url is" matches "The URL is https://..."; no words, operators or
    wildcards: "%", "_", "*", quotes are plain characters). From TRIGRAM characters on it is looked up in
    the answers full-text index (trigram, so any substring is found, and case folds for any alphabet);
    a shorter text is a LIKE scan of the rows the other filters leave (case folds for A-Z only).
    """

    step_min: int | None = None
    step_max: int | None = None
    status: str | None = None
    rule: str | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    task_index: int | None = None
    text: str | None = None
    trainable: bool | None = None
    sort: str = "step"
    descending: bool = False

    def __post_init__(self) -> None:
        if self.sort not in SORTS:
            raise ValueError(f"sort {self.sort!r}: use one of {', '.join(SORTS)}")

    def order_by(self) -> str:
        columns = SORTS[self.sort]
        return ", ".join(f"{column} DESC" for column in columns.split(", ")) if self.descending else columns

    def where(self) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []

        def add(clause: str, value: Any) -> None:
            if value is not None:
                clauses.append(clause)
                params.append(value)

        add("step >= ?", self.step_min)
        add("step <= ?", self.step_max)
        add("status = ?", None if self.status is None else str(self.status))
        add("instr(',' || verdicts || ',', ',' || ? || ',') > 0", None if self.rule is None else str(self.rule))
        add("reward >= ?", self.reward_min)
        add("reward <= ?", self.reward_max)
        add("task_index = ?", self.task_index)
        add("trainable = ?", None if self.trainable is None else int(self.trainable))
        if self.text and len(self.text) >= TRIGRAM:
            phrase = '"' + self.text.replace('"', '""') + '"'  # one FTS5 string: consecutive trigrams
            add("rowid IN (SELECT rowid FROM answers WHERE answers MATCH ?)", phrase)
        elif self.text:
            escaped = self.text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            add("final_answer LIKE ? ESCAPE '\\'", f"%{escaped}%")
        return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


def _row(row: sqlite3.Row) -> dict[str, Any]:
    item = dict(row)
    item["trainable"] = bool(item["trainable"])
    item["verdicts"] = item["verdicts"].split(",") if item["verdicts"] else []
    return item


if __name__ == "__main__":  # python -m veri.archive.index JOB_FOLDER: rebuild its index from the files
    import sys

    for folder in sys.argv[1:]:
        done = rebuild_index(Path(folder))
        print(f"{folder}: {done.rollouts} rollouts, {done.steps} steps; unreadable: {done.unreadable or 'none'}")
