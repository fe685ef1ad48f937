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

This module holds the schema and what a row holds; the trainer writes it (`index_writer.IndexWriter`, one
connection, a commit per row); the console reads it with `index_reader.ArchiveIndex`, which opens the
database read-only, so a read-only archive mount works; `index_query.RolloutQuery` is a filter and order. The database
uses SQLite's default rollback journal (no WAL), because WAL needs a writable folder even to read.

Schema versions (PRAGMA user_version): 1 had no final_answer; 2 adds it and the indexes the console's
filters and sorts use; 3 adds the answers full-text index (2 scanned every row of the range for text).
The index is rebuilt from the files, never migrated: the trainer's `JobArchive`
rebuilds an older one when it opens the archive, `rebuild_index` (index_writer.py; `python -m
veri.archive.index JOB_FOLDER`) does it by hand, and `ArchiveIndex`
refuses one it cannot read with that fix in the message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


if __name__ == "__main__":  # python -m veri.archive.index JOB_FOLDER: rebuild its index from the files
    import sys

    from veri.archive.index_writer import rebuild_index

    for folder in sys.argv[1:]:
        done = rebuild_index(Path(folder))
        print(f"{folder}: {done.rollouts} rollouts, {done.steps} steps; unreadable: {done.unreadable or 'none'}")
