"""Rollout records as JSONL: one record per line, exactly the archived file (what `veri debug` reads)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from veri.archive import ArchiveIndex, RolloutQuery

BATCH = 500  # index rows read per query while streaming a whole job


def records_jsonl(index: ArchiveIndex, query: RolloutQuery) -> Iterator[bytes]:
    """Each matching rollout's archived JSON as one line, in step, task, rollout order."""
    offset = 0
    while rows := index.search(query, limit=BATCH, offset=offset):
        for row in rows:
            yield record_line(index, row)
        offset += len(rows)


def record_line(index: ArchiveIndex, row: dict[str, Any]) -> bytes:
    # The file is the record's model_dump_json: one line already. Re-serialize only if someone pretty-printed it.
    data = index.layout.inside(row["path"]).read_bytes().strip()
    if b"\n" in data:
        data = index.read_rollout(row["path"]).model_dump_json().encode("utf-8")
    return data + b"\n"
