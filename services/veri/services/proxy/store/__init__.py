"""Durable span store (SQLite, WAL): sessions, spans, the ids later turns bridge from, and which
policy replica each session is pinned to (with per-replica counters).

Everything the proxy knows about a rollout lives here, not in a process's memory, so the proxy
can run as several workers and survives restarts. A span is committed before its response is
sent (WAL + synchronous=NORMAL survives a process crash, which is the failure we guard against).
A session is pinned to a replica in the same write transaction that creates it, so workers opening
sessions at once still spread them evenly.

What every call reads is kept off SQLite where it can be without going stale: the ids of each
rollout's latest span (a row's ids never change once written, so a copy is good in any worker), the
long texts this worker knows are stored, and the announced policy version, mirrored in a small shared
file every worker maps (`PolicyVersionMirror`).

One module per table (sessions, replicas, policy_version, spans, recorded, requests), all sharing this
facade's connection, lock and write-transaction helper (database.py).
"""

from __future__ import annotations

import threading
from pathlib import Path

from veri.services.proxy.checkpointer import WalCheckpointer
from veri.services.proxy.store.database import BUSY_TIMEOUT_S, open_database, store_error
from veri.services.proxy.store.policy_version import PolicyVersion, PolicyVersionMirror
from veri.services.proxy.store.recorded import RecordedRequests
from veri.services.proxy.store.replicas import ReplicaCounters
from veri.services.proxy.store.requests import RequestNotes
from veri.services.proxy.store.sessions import SessionRow, Sessions
from veri.services.proxy.store.spans import MAX_PROMPT_DEPTH, PriorTurn, RecentIds, SharedIds, Spans, _SpanIds

__all__ = ["BUSY_TIMEOUT_S", "MAX_PROMPT_DEPTH", "PolicyVersionMirror", "PriorTurn", "RecentIds", "SessionRow",
           "SharedIds", "SpanStore", "_SpanIds", "store_error"]


class SpanStore(Sessions, ReplicaCounters, PolicyVersion, Spans, RecordedRequests, RequestNotes):
    def __init__(self, folder: Path):
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / "spans.sqlite"
        self._lock = threading.RLock()  # RLock: a write transaction (`_write`) may run under a caller's hold
        self._db = open_database(self.path)
        self._recent_ids = RecentIds()
        self._dropped: set[int] = set()  # notes of failed requests not deleted yet (`drop_request`)
        self._stored_texts: set[str] = set()  # long texts this worker knows are in `texts` (never deleted)
        self._policy_version = PolicyVersionMirror(folder / "policy_version")
        self._write_policy_version(None)  # the mirror from the row: it may be new, or older than the row
        self._checkpointer = WalCheckpointer(self.path)

    def close(self) -> None:
        self._checkpointer.stop()
        with self._lock:
            self._db.close()
            self._policy_version.close()
