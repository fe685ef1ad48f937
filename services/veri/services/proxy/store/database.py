"""The span store's one SQLite file: its schema, how a connection is opened, and the base every table's
module builds on (the connection, the lock and the one write-transaction helper they share)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from veri.services.proxy.errors import CaptureFailed, ProxyError, StoreBusy

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    rollout_id TEXT PRIMARY KEY,
    api_key TEXT NOT NULL,
    status TEXT NOT NULL,
    metadata TEXT NOT NULL,
    created_at REAL NOT NULL,
    closed_at REAL,
    replica INTEGER NOT NULL DEFAULT 0   -- the policy replica every call of this rollout goes to
);
CREATE TABLE IF NOT EXISTS spans (
    rollout_id TEXT NOT NULL,
    request_index INTEGER NOT NULL,
    span TEXT NOT NULL,
    prefix_hash TEXT NOT NULL,      -- hash of (tools, messages..., this call's assistant reply)
    n_messages INTEGER NOT NULL,    -- messages in that prefix
    prompt_ids BLOB NOT NULL,       -- the prompt's ids after the prompt_shared it has from prompt_base
    completion_ids BLOB NOT NULL,
    prompt_base INTEGER,            -- the span whose prompt + completion ids this prompt starts with (NULL: none)
    prompt_shared INTEGER,          -- how many of them
    prompt_depth INTEGER,           -- spans read to rebuild the prompt (0: prompt_ids is all of it)
    long_texts TEXT,                -- where in `span` a long string is kept in `texts` (JSON paths; NULL: none)
    PRIMARY KEY (rollout_id, request_index)
);
CREATE TABLE IF NOT EXISTS texts (hash TEXT PRIMARY KEY, text TEXT NOT NULL) WITHOUT ROWID;  -- long_texts.py
CREATE INDEX IF NOT EXISTS spans_by_prefix ON spans (rollout_id, prefix_hash);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS requests (   -- harness requests the capture path took on: a retry finds its first try
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    rollout_id TEXT NOT NULL,
    request_key TEXT NOT NULL,      -- history.request_key: route + body
    started_at REAL NOT NULL,
    request_index INTEGER,          -- the span that answered it; NULL while in flight
    worker_pid INTEGER              -- the proxy worker taking it on (its death drops the try in flight)
);
CREATE INDEX IF NOT EXISTS requests_by_key ON requests (rollout_id, request_key);
CREATE TABLE IF NOT EXISTS replicas (
    replica INTEGER PRIMARY KEY,
    url TEXT NOT NULL,
    rank INTEGER,                   -- NULL: no X-data-parallel-rank header
    requests INTEGER NOT NULL DEFAULT 0,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    reported_prompt_tokens INTEGER NOT NULL DEFAULT 0,   -- prompt tokens of calls that reported cache hits
    cached_prompt_tokens INTEGER NOT NULL DEFAULT 0,
    cache_reports INTEGER NOT NULL DEFAULT 0,
    failed_requests INTEGER NOT NULL DEFAULT 0      -- unreachable, 5xx, aborted: no span
);
CREATE TABLE IF NOT EXISTS recorded_sessions (rollout_id TEXT PRIMARY KEY);   -- sessions whose requests are kept
CREATE TABLE IF NOT EXISTS recorded_requests (   -- the harness's requests as sent (veri replay)
    rollout_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    request TEXT NOT NULL,          -- RecordedRequest minus body and status
    body BLOB NOT NULL,
    status INTEGER,
    answered_at REAL,               -- when the answer started (a span is committed before it)
    PRIMARY KEY (rollout_id, seq)
);
"""

# Columns added since the first release of a table, for stores an older proxy wrote.
_ADDED_COLUMNS = [
    ("sessions", "replica", "INTEGER NOT NULL DEFAULT 0"),
    ("replicas", "failed_requests", "INTEGER NOT NULL DEFAULT 0"),
    ("recorded_requests", "answered_at", "REAL"),
    ("requests", "worker_pid", "INTEGER"),
    ("spans", "prompt_base", "INTEGER"),
    ("spans", "prompt_shared", "INTEGER"),
    ("spans", "prompt_depth", "INTEGER"),
    ("spans", "long_texts", "TEXT"),
]

# How long a write waits for another worker's write lock. Store calls run on the worker's event loop,
# so a wait stalls every call on it; commits take milliseconds, so a lock held past this is refused
# (`StoreBusy`, a 503 the SDKs retry) rather than waited for (sqlite3's default: 5 s; this was 30).
BUSY_TIMEOUT_S = 0.5


def store_error(exc: sqlite3.Error, what: str) -> ProxyError:
    """A SQLite error on the request path as the proxy's own: busy (a 503 to retry) or a failed capture."""
    code = getattr(exc, "sqlite_errorcode", 0)  # only SQLite's own errors carry one
    if code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        return StoreBusy(f"{what}: the span store stayed locked by another writer past {BUSY_TIMEOUT_S} s"
                         " (a long write, or a tool holding spans.sqlite open); retry the call")
    return CaptureFailed(f"{what} ({exc}); check the store's disk (`df` on its folder): retry the call")


def open_database(path: Path) -> sqlite3.Connection:
    """WAL, the schema (older stores get the columns added since), and the request path's busy timeout."""
    # Opening waits as long as it must (workers starting at once all create the schema); the
    # request path then waits BUSY_TIMEOUT_S at most.
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("PRAGMA wal_autocheckpoint=0")  # checkpointed off the request path instead
    db.executescript(_SCHEMA)
    for table, column, kind in _ADDED_COLUMNS:  # a store written by an older proxy
        if column not in {row[1] for row in db.execute(f"PRAGMA table_info({table})")}:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
    # Opening a session counts the open ones per replica: without it, a scan of every session the
    # store ever had (~1 ms at 20k, in every session open).
    db.execute("CREATE INDEX IF NOT EXISTS sessions_by_status ON sessions (status, replica)")
    db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
    return db


class Tables:
    """What every table's methods share: one connection, one lock (a worker's threads take turns), and
    `_write`, the one way to run a write transaction."""

    _db: sqlite3.Connection
    _lock: threading.RLock

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """Under the lock: BEGIN IMMEDIATE (the write lock first, so what is read inside sees no other
        worker's write), COMMIT at the end, ROLLBACK on any error (and re-raise)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
