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
"""

from __future__ import annotations

import mmap
import os
import secrets
import sqlite3
import struct
import threading
import time
import uuid
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import structlog
from cachetools import LRUCache

from veri.core.records import RecordedRequest, ReplicaStats, SessionStatus, Span
from veri.proxy.checkpointer import WalCheckpointer
from veri.proxy.errors import (
    CaptureFailed,
    InvalidApiKey,
    InvalidRequest,
    ProxyError,
    SessionClosed,
    StoreBusy,
    UnknownRollout,
)
from veri.proxy.long_texts import LongTexts, hashes_at, join
from veri.proxy.replicas import Replica

log = structlog.get_logger("veri.proxy.store")

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

# A bridged prompt is stored as what it adds to the prompt + completion it extends; past this many
# links the whole prompt is stored again, so rebuilding one reads a bounded number of rows.
MAX_PROMPT_DEPTH = 8

# Ids of rollouts' latest spans kept in memory, at most this many in all (~8 bytes each: the lists
# share their int objects along a rollout): 256 rollouts of 8k-token prompts.
RECENT_IDS_BUDGET = 2_000_000


@dataclass(frozen=True)
class SessionRow:
    rollout_id: str
    api_key: str
    status: SessionStatus
    metadata: dict[str, Any]
    replica: int = 0


@dataclass(frozen=True)
class SharedIds:
    """A prompt's first `count` ids are the prompt + completion ids of span `request_index`."""

    request_index: int
    count: int


@dataclass(frozen=True)
class PriorTurn:
    """What a later call needs from an earlier one to bridge: its exact ids (shared: never mutated)."""

    request_index: int
    n_messages: int
    prompt_ids: list[int]
    completion_ids: list[int]


@dataclass(frozen=True)
class _SpanIds:
    request_index: int
    prompt_ids: list[int]
    completion_ids: list[int]
    prompt_depth: int  # as in its row: spans read to rebuild its prompt


class RecentIds:
    """The ids of each rollout's latest span this worker wrote or read, LRU by rollout within a budget.

    A later turn bridges from its previous one: 8k ids read back and unpacked cost ~0.2 ms a call."""

    def __init__(self, budget: int = RECENT_IDS_BUDGET) -> None:
        self._by_rollout: LRUCache[str, _SpanIds] = LRUCache(maxsize=budget, getsizeof=_ids_held)

    def get(self, rollout_id: str, request_index: int) -> _SpanIds | None:
        found = self._by_rollout.get(rollout_id)  # marks it used
        if found is None or found.request_index != request_index:
            return None
        return found

    def put(self, rollout_id: str, ids: _SpanIds) -> None:
        known = self._by_rollout.get(rollout_id)
        if known is not None and known.request_index > ids.request_index:
            return  # a later span of the rollout is the one its next turn extends
        self._by_rollout.pop(rollout_id, None)
        if _ids_held(ids) <= self._by_rollout.maxsize:  # one span over the whole budget is not kept
            self._by_rollout[rollout_id] = ids  # the least recently used go until it fits


def _ids_held(ids: _SpanIds) -> int:
    return len(ids.prompt_ids) + len(ids.completion_ids)


class PolicyVersionMirror:
    """The announced policy version (the `meta` row is the durable one) in a file every worker maps.

    Every call reads the version before and after its policy call, and again for its span; a mapped
    read costs no SQL. The store writes the row and this mirror in one write transaction, so a worker
    that (re)starts while a version is announced cannot put the older one back."""

    _FORMAT = "<q"

    def __init__(self, path: Path) -> None:
        if not path.exists():
            # Made whole and linked into place: a worker starting beside this one maps 8 written bytes or
            # makes its own, never a file another is sizing (a map past a file's end is a SIGBUS).
            staged = path.with_name(f".{path.name}.{os.getpid()}")
            staged.write_bytes(bytes(8))
            try:
                os.link(staged, path)
            except FileExistsError:
                pass
            finally:
                staged.unlink()
        with path.open("r+b") as file:
            if os.fstat(file.fileno()).st_size != 8:
                raise RuntimeError(f"{path} is not the proxy's 8-byte policy version mirror: remove it (the proxy"
                                   " makes it again from the span store)")
            self._map = mmap.mmap(file.fileno(), 8)

    def read(self) -> int:
        return struct.unpack_from(self._FORMAT, self._map)[0]

    def write(self, version: int) -> None:
        struct.pack_into(self._FORMAT, self._map, 0, version)

    def close(self) -> None:
        self._map.close()


# Token ids live in their own columns (compact, and read alone when a later turn bridges); the
# JSON column holds the rest of the span, its long strings in `texts`.
_IN_BLOBS = {"prompt_token_ids", "completion_token_ids"}
_IN_COLUMNS = {*_IN_BLOBS, "request_index"}  # assigned in the write transaction
_WITH_TEXTS = ("request", "response", "messages", "tools", "reply_message")
_SPAN_ROW = "request_index, span, long_texts, prompt_base, prompt_shared, prompt_ids, completion_ids"


_ID_BYTES = 4

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


def _pack(ids: list[int]) -> bytes:
    # The same bytes as array("i", ids).tobytes() (native 4-byte ints), in half the time for 8k ids.
    return struct.pack(f"{len(ids)}i", *ids)


def _unpack(blob: bytes) -> list[int]:
    ids = array("i")
    ids.frombytes(blob)
    return ids.tolist()


class SpanStore:
    def __init__(self, folder: Path):
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / "spans.sqlite"
        self._lock = threading.Lock()
        # Opening waits as long as it must (workers starting at once all create the schema); the
        # request path then waits BUSY_TIMEOUT_S at most.
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA wal_autocheckpoint=0")  # checkpointed off the request path instead
        self._db.executescript(_SCHEMA)
        for table, column, kind in _ADDED_COLUMNS:  # a store written by an older proxy
            if column not in {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}:
                self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
        # Opening a session counts the open ones per replica: without it, a scan of every session the
        # store ever had (~1 ms at 20k, in every session open).
        self._db.execute("CREATE INDEX IF NOT EXISTS sessions_by_status ON sessions (status, replica)")
        self._db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
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

    # --- sessions ---------------------------------------------------------------------------

    def open_session(self, rollout_id: str | None, metadata: dict[str, Any]) -> SessionRow:
        """A new open session, pinned to the replica with the fewest open sessions (round-robin on ties)."""
        rollout_id = rollout_id or f"r-{uuid.uuid4().hex[:16]}"
        api_key = f"veri-{secrets.token_urlsafe(24)}"
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")  # the choice and the insert see no other worker's open
            try:
                replica = self._least_loaded_replica()
                self._db.execute(
                    "INSERT INTO sessions VALUES (?, ?, ?, ?, ?, NULL, ?)",
                    (rollout_id, api_key, SessionStatus.OPEN.value, orjson.dumps(metadata).decode(), time.time(),
                     replica),
                )
                self._db.execute("COMMIT")
            except sqlite3.IntegrityError:
                self._db.execute("ROLLBACK")
                raise InvalidRequest(f"rollout_id {rollout_id!r} already exists; omit it to get a fresh one") from None
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return SessionRow(rollout_id, api_key, SessionStatus.OPEN, metadata, replica)

    def _least_loaded_replica(self) -> int:
        """Inside a write transaction: the replica to pin the next session to, and advance the cursor."""
        count = self._db.execute("SELECT COUNT(*) FROM replicas").fetchone()[0] or 1
        open_per_replica = [0] * count
        for replica, sessions in self._db.execute(
            "SELECT replica, COUNT(*) FROM sessions WHERE status = ? GROUP BY replica", (SessionStatus.OPEN.value,)
        ):
            if replica < count:
                open_per_replica[replica] = sessions
        found = self._db.execute("SELECT value FROM meta WHERE key = 'next_replica'").fetchone()
        cursor = int(found[0]) % count if found else 0
        fewest = min(open_per_replica)
        chosen = next(index % count for index in range(cursor, cursor + count)
                      if open_per_replica[index % count] == fewest)
        self._db.execute("INSERT OR REPLACE INTO meta VALUES ('next_replica', ?)", (str(chosen + 1),))
        return chosen

    def get_session(self, rollout_id: str) -> SessionRow:
        with self._lock:
            found = self._db.execute(
                "SELECT rollout_id, api_key, status, metadata, replica FROM sessions WHERE rollout_id = ?",
                (rollout_id,),
            ).fetchone()
        if found is None:
            raise UnknownRollout(f"unknown rollout {rollout_id!r}: open a session first (POST /control/sessions)")
        return SessionRow(found[0], found[1], SessionStatus(found[2]), orjson.loads(found[3]), found[4])

    def authorize(self, rollout_id: str, presented_key: str | None) -> SessionRow:
        """The session, if `presented_key` is its key and it is still open."""
        session = self.get_session(rollout_id)
        if presented_key is None or not secrets.compare_digest(presented_key, session.api_key):
            raise InvalidApiKey(f"wrong API key for rollout {rollout_id!r}: use the key this rollout was given")
        if session.status is SessionStatus.CLOSED:
            raise SessionClosed(f"rollout {rollout_id!r} is closed: its spans are final, open a new session")
        return session

    def close_session(self, rollout_id: str) -> SessionRow:
        self.get_session(rollout_id)
        with self._lock:
            self._db.execute(
                "UPDATE sessions SET status = ?, closed_at = ? WHERE rollout_id = ?",
                (SessionStatus.CLOSED.value, time.time(), rollout_id),
            )
        return self.get_session(rollout_id)

    # --- policy replicas ----------------------------------------------------------------------

    def set_replicas(self, replicas: list[Replica]) -> None:
        """Record the proxy's replicas; a replica whose URL or rank changed starts its counters afresh.

        Every worker calls this at startup with the same list, so it is idempotent."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                rows = self._db.execute("SELECT replica, url, rank FROM replicas")
                known = {replica: (url, rank) for replica, url, rank in rows}
                for replica in replicas:
                    if known.get(replica.index) != (replica.url, replica.rank):
                        self._db.execute("INSERT OR REPLACE INTO replicas (replica, url, rank) VALUES (?, ?, ?)",
                                         (replica.index, replica.url, replica.rank))
                self._db.execute("DELETE FROM replicas WHERE replica >= ?", (len(replicas),))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def replica_stats(self) -> list[ReplicaStats]:
        with self._lock:
            rows = self._db.execute(
                "SELECT r.replica, r.url, r.rank, r.requests, r.failed_requests, r.prompt_tokens,"
                " r.reported_prompt_tokens, r.cached_prompt_tokens, r.cache_reports,"
                " (SELECT COUNT(*) FROM sessions s WHERE s.replica = r.replica),"
                " (SELECT COUNT(*) FROM sessions s WHERE s.replica = r.replica AND s.status = ?)"
                " FROM replicas r ORDER BY r.replica",
                (SessionStatus.OPEN.value,),
            ).fetchall()
        return [
            ReplicaStats(
                replica=replica, url=url, rank=rank, sessions=sessions, open_sessions=open_sessions,
                requests=requests, failed_requests=failed, prompt_tokens=prompt_tokens,
                cached_prompt_tokens=cached if reports else None,
                hit_rate=cached / reported if reports and reported else None,
            )
            for (replica, url, rank, requests, failed, prompt_tokens, reported, cached, reports, sessions,
                 open_sessions) in rows
        ]

    def count_failed_call(self, replica: int) -> None:
        with self._lock:
            self._db.execute("UPDATE replicas SET failed_requests = failed_requests + 1 WHERE replica = ?", (replica,))

    # --- policy version (for backends that do not report it, e.g. vLLM) -------------------------

    def set_policy_version(self, version: int) -> None:
        self._write_policy_version(version)

    def policy_version(self) -> int:
        return self._policy_version.read()

    def _write_policy_version(self, version: int | None) -> None:
        """The row and its mirror in one write transaction; None: the mirror from the row as it is."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                if version is None:
                    found = self._db.execute("SELECT value FROM meta WHERE key = 'policy_version'").fetchone()
                    version = int(found[0]) if found else 0
                else:
                    self._db.execute("INSERT OR REPLACE INTO meta VALUES ('policy_version', ?)", (str(version),))
                before = self._policy_version.read()
                self._policy_version.write(version)
                try:
                    self._db.execute("COMMIT")
                except BaseException:
                    self._policy_version.write(before)
                    raise
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    # --- spans ------------------------------------------------------------------------------

    def add_span(self, span: Span, *, prefix_hash: str, n_messages: int, answers: int | None = None,
                 shared: SharedIds | None = None) -> Span:
        """Assign the next request_index and commit the span (with the request it `answers`, from
        `begin_request`, in the same transaction). `shared`: the prompt's ids it has from an earlier
        span, stored by reference. Returns the stored span."""
        long_texts = LongTexts()
        stored = span.model_copy(update={name: long_texts.split(getattr(span, name), [name]) for name in _WITH_TEXTS})
        fields = stored.model_dump_json(exclude=_IN_COLUMNS)
        try:
            with self._lock:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    (next_index,) = self._db.execute(
                        "SELECT COALESCE(MAX(request_index) + 1, 0) FROM spans WHERE rollout_id = ?",
                        (span.rollout_id,),
                    ).fetchone()
                    span.request_index = next_index
                    base, count, depth = self._prompt_reference(span.rollout_id, shared)
                    if new_texts := [(key, text) for key, text in long_texts.texts.items()
                                     if key not in self._stored_texts]:
                        self._db.executemany("INSERT OR IGNORE INTO texts VALUES (?, ?)", new_texts)
                    self._db.execute(
                        "INSERT INTO spans (rollout_id, request_index, span, prefix_hash, n_messages, prompt_ids,"
                        " completion_ids, prompt_base, prompt_shared, prompt_depth, long_texts)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            span.rollout_id,
                            next_index,
                            fields,
                            prefix_hash,
                            n_messages,
                            _pack(span.prompt_token_ids[count:]),
                            _pack(span.completion_token_ids),
                            base,
                            count,
                            depth,
                            orjson.dumps(long_texts.at).decode() if long_texts.at else None,
                        ),
                    )
                    self._count_call(span)
                    if answers is not None:
                        self._db.execute("UPDATE requests SET request_index = ? WHERE id = ?", (next_index, answers))
                    self._db.execute("COMMIT")
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                self._stored_texts.update(key for key, _ in new_texts)
                self._recent_ids.put(span.rollout_id, _SpanIds(next_index, span.prompt_token_ids,
                                                               span.completion_token_ids, depth))
        except sqlite3.Error as exc:
            raise store_error(exc, "could not store the span; the response was withheld") from exc
        return span

    def _prompt_reference(self, rollout_id: str, shared: SharedIds | None) -> tuple[int | None, int, int]:
        """(prompt_base, prompt_shared, prompt_depth) for a new span's row: by reference while the chain is short."""
        if shared is None or shared.count == 0:
            return None, 0, 0
        recent = self._recent_ids.get(rollout_id, shared.request_index)
        if recent is not None:
            base_depth: int | None = recent.prompt_depth
        else:
            found = self._db.execute("SELECT prompt_depth FROM spans WHERE rollout_id = ? AND request_index = ?",
                                     (rollout_id, shared.request_index)).fetchone()
            base_depth = None if found is None else found[0] or 0
        if base_depth is None or base_depth + 1 > MAX_PROMPT_DEPTH:
            return None, 0, 0
        return shared.request_index, shared.count, base_depth + 1

    def _ids(self, rollout_id: str, request_index: int) -> tuple[bytes, bytes]:
        """A span's (prompt, completion) ids as packed bytes, its prompt rebuilt from the spans it extends."""
        base, count, prompt, completion = self._db.execute(
            "SELECT prompt_base, prompt_shared, prompt_ids, completion_ids FROM spans"
            " WHERE rollout_id = ? AND request_index = ?", (rollout_id, request_index),
        ).fetchone()
        return self._prompt(rollout_id, base, count, prompt, {}), completion

    def _prompt(self, rollout_id: str, base: int | None, count: int | None, tail: bytes,
                known: dict[int, tuple[bytes, bytes]]) -> bytes:
        if base is None:
            return tail
        prompt, completion = known.get(base) or self._ids(rollout_id, base)
        return (prompt + completion)[: (count or 0) * _ID_BYTES] + tail

    def _spans(self, rollout_id: str, rows: list[tuple]) -> list[Span]:
        """Spans from `_SPAN_ROW` rows (in request order), long strings and prompts rebuilt."""
        paths = [orjson.loads(row[2]) if row[2] else [] for row in rows]
        fields = [orjson.loads(row[1]) for row in rows]
        wanted = {key for one, at in zip(fields, paths, strict=True) for key in hashes_at(one, at)}
        texts = self._texts(wanted)
        known: dict[int, tuple[bytes, bytes]] = {}
        spans = []
        for (index, _, _, base, count, prompt, completion), one, at in zip(rows, fields, paths, strict=True):
            prompt = self._prompt(rollout_id, base, count, prompt, known)
            known[index] = (prompt, completion)
            join(one, at, texts)
            spans.append(Span.model_validate({**one, "request_index": index, "prompt_token_ids": _unpack(prompt),
                                              "completion_token_ids": _unpack(completion)}))
        return spans

    def _texts(self, hashes: set[str]) -> dict[str, str]:
        if not hashes:
            return {}
        marks = ",".join("?" * len(hashes))
        return dict(self._db.execute(f"SELECT hash, text FROM texts WHERE hash IN ({marks})", tuple(hashes)))

    def _count_call(self, span: Span) -> None:
        if span.replica is None:
            return
        prompt_tokens, cached = len(span.prompt_token_ids), span.cached_prompt_tokens
        reported = cached is not None
        self._db.execute(
            "UPDATE replicas SET requests = requests + 1, prompt_tokens = prompt_tokens + ?,"
            " reported_prompt_tokens = reported_prompt_tokens + ?, cached_prompt_tokens = cached_prompt_tokens + ?,"
            " cache_reports = cache_reports + ? WHERE replica = ?",
            (prompt_tokens, prompt_tokens if reported else 0, cached or 0, int(reported), span.replica),
        )

    def spans(self, rollout_id: str) -> list[Span]:
        self.get_session(rollout_id)
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_SPAN_ROW} FROM spans WHERE rollout_id = ? ORDER BY request_index", (rollout_id,),
            ).fetchall()
            return self._spans(rollout_id, rows)

    def find_prior_turn(self, rollout_id: str, prefix_hashes: list[str]) -> PriorTurn | None:
        """The latest span whose (messages + reply) equals the longest of the given prefixes."""
        if not prefix_hashes:
            return None
        marks = ",".join("?" * len(prefix_hashes))
        with self._lock:
            found = self._db.execute(
                f"SELECT request_index, n_messages, prompt_depth FROM spans "
                f"WHERE rollout_id = ? AND prefix_hash IN ({marks}) "
                f"ORDER BY n_messages DESC, request_index DESC LIMIT 1",
                (rollout_id, *prefix_hashes),
            ).fetchone()
            if found is None:
                return None
            index, n_messages, depth = found
            recent = self._recent_ids.get(rollout_id, index)
            if recent is None:
                prompt, completion = self._ids(rollout_id, index)
                recent = _SpanIds(index, _unpack(prompt), _unpack(completion), depth or 0)
                self._recent_ids.put(rollout_id, recent)
        return PriorTurn(index, n_messages, recent.prompt_ids, recent.completion_ids)

    def span_by_response_id(self, rollout_id: str, response_id: str) -> Span | None:
        """The span of this rollout whose response carries `response_id` (Responses API chains)."""
        with self._lock:
            found = self._db.execute(
                f"SELECT {_SPAN_ROW} FROM spans WHERE rollout_id = ? "
                "AND json_extract(span, '$.response.id') = ? ORDER BY request_index DESC LIMIT 1",
                (rollout_id, response_id),
            ).fetchone()
            return self._spans(rollout_id, [found])[0] if found is not None else None

    def latest_span_messages(self, rollout_id: str) -> tuple[int, list[dict[str, Any]]] | None:
        """(request_index, messages + assistant reply) of the latest span, for diagnostics."""
        with self._lock:
            found = self._db.execute(
                "SELECT request_index, span, long_texts FROM spans WHERE rollout_id = ?"
                " ORDER BY request_index DESC LIMIT 1",
                (rollout_id,),
            ).fetchone()
            if found is None:
                return None
            span, at = orjson.loads(found[1]), orjson.loads(found[2]) if found[2] else []
            join(span, at, self._texts(set(hashes_at(span, at))))
        return found[0], [*span["messages"], span["reply_message"]]

    # --- recorded requests (veri replay) ---------------------------------------------------------

    def record_requests_of(self, rollout_id: str) -> None:
        with self._lock:
            self._db.execute("INSERT OR IGNORE INTO recorded_sessions VALUES (?)", (rollout_id,))

    def records_requests(self, rollout_id: str) -> bool | None:
        """Whether the session keeps its requests; None when there is no such session (yet)."""
        with self._lock:
            session, recorded = self._db.execute(
                "SELECT EXISTS (SELECT 1 FROM sessions WHERE rollout_id = ?),"
                " EXISTS (SELECT 1 FROM recorded_sessions WHERE rollout_id = ?)", (rollout_id, rollout_id),
            ).fetchone()
        return bool(recorded) if session else None

    def add_request(self, rollout_id: str, request: dict[str, Any], body: bytes) -> int:
        """Keep one request as it arrived; returns its seq (arrival order within the rollout)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                (seq,) = self._db.execute(
                    "SELECT COALESCE(MAX(seq) + 1, 0) FROM recorded_requests WHERE rollout_id = ?", (rollout_id,)
                ).fetchone()
                self._db.execute("INSERT INTO recorded_requests VALUES (?, ?, ?, ?, NULL, NULL)",
                                 (rollout_id, seq, orjson.dumps(request).decode(), body))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return seq

    def set_request_status(self, rollout_id: str, seq: int, status: int) -> None:
        with self._lock:
            self._db.execute(
                "UPDATE recorded_requests SET status = ?, answered_at = ? WHERE rollout_id = ? AND seq = ?",
                (status, time.time(), rollout_id, seq),
            )

    def recorded_requests(self, rollout_id: str) -> list[RecordedRequest]:
        self.get_session(rollout_id)
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, request, body, status, answered_at FROM recorded_requests WHERE rollout_id = ?"
                " ORDER BY seq",
                (rollout_id,),
            ).fetchall()
        return [
            RecordedRequest.model_validate({**orjson.loads(request), "seq": seq, "status": status,
                                            "answered_at": answered_at, "body": body.decode(errors="replace")})
            for seq, request, body, status, answered_at in rows
        ]

    # --- requests in flight and answered: recognising a client's retry -------------------------------

    def begin_request(self, rollout_id: str, request_key: str) -> int:
        """Note a request the capture path is taking on; its id goes to `add_span(answers=...)`."""
        try:
            with self._lock:
                self._delete_dropped()
                cursor = self._db.execute(
                    "INSERT INTO requests (rollout_id, request_key, started_at, worker_pid) VALUES (?, ?, ?, ?)",
                    (rollout_id, request_key, time.time(), os.getpid()))
        except sqlite3.Error as exc:
            raise store_error(exc, "could not note the request in the span store; nothing was sampled") from exc
        return cursor.lastrowid or 0

    def drop_requests_of_worker(self, pid: int) -> int:
        """A worker died (gunicorn's master saw it exit): its tries in flight will never be answered, so a
        client's retry of one samples afresh instead of waiting for it. Returns how many were dropped."""
        with self._lock:
            cursor = self._db.execute("DELETE FROM requests WHERE worker_pid = ? AND request_index IS NULL", (pid,))
        return cursor.rowcount

    def drop_request(self, request_id: int) -> None:
        """A request that ended without a span (it failed anywhere): a retry of it samples afresh. A
        note already answered (its span committed) stays. Never raises: where the store takes no
        delete now (busy, disk full), this worker keeps the note as dropped, its own retries ignore
        it, and its next store call deletes it; until then a retry on another worker waits for it."""
        with self._lock:
            self._dropped.add(request_id)
            self._delete_dropped()

    def _delete_dropped(self) -> None:
        """Delete the notes `drop_request` could not (under the lock)."""
        if not self._dropped:
            return
        try:
            self._db.executemany("DELETE FROM requests WHERE id = ? AND request_index IS NULL",
                                 [(request_id,) for request_id in self._dropped])
        except sqlite3.Error as exc:
            log.warning("could not drop failed requests' notes; retried on the next call", error=str(exc),
                        notes=len(self._dropped))
            return
        self._dropped.clear()

    def answered_request(self, rollout_id: str, request_key: str, *, in_flight_since: float) -> int | None:
        """Of the latest try of this request (one in flight counts only if it started after
        `in_flight_since`): the span that answered it, -1 while it is in flight; None: no try."""
        with self._lock:
            self._delete_dropped()
            dropped = tuple(self._dropped)  # notes of failed tries this worker could not delete yet
            not_dropped = f" AND id NOT IN ({', '.join('?' * len(dropped))})" if dropped else ""
            found = self._db.execute(
                "SELECT request_index FROM requests WHERE rollout_id = ? AND request_key = ?"
                f" AND (request_index IS NOT NULL OR started_at >= ?){not_dropped} ORDER BY id DESC LIMIT 1",
                (rollout_id, request_key, in_flight_since, *dropped),
            ).fetchone()
        if found is None:
            return None
        return -1 if found[0] is None else found[0]

    def add_retry(self, rollout_id: str, request_index: int, at: float) -> Span:
        """Append `at` to the span's `retried_at` (the client re-sent its request); the updated span."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                row = self._db.execute(
                    f"SELECT {_SPAN_ROW} FROM spans WHERE rollout_id = ? AND request_index = ?",
                    (rollout_id, request_index),
                ).fetchone()
                fields = orjson.loads(row[1])
                fields["retried_at"] = [*fields.get("retried_at", []), at]
                span = orjson.dumps(fields).decode()
                self._db.execute("UPDATE spans SET span = ? WHERE rollout_id = ? AND request_index = ?",
                                 (span, rollout_id, request_index))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            return self._spans(rollout_id, [(row[0], span, *row[2:])])[0]

    def count_spans(self, rollout_id: str) -> int:
        with self._lock:
            (count,) = self._db.execute("SELECT COUNT(*) FROM spans WHERE rollout_id = ?", (rollout_id,)).fetchone()
        return count
