"""The `sessions` table: one row per rollout, its API key, status and the replica it is pinned to."""

from __future__ import annotations

import secrets
import sqlite3
import time
import uuid
from dataclasses import dataclass
from typing import Any

import orjson

from veri.core.records import SessionStatus
from veri.services.proxy.errors import InvalidApiKey, InvalidRequest, SessionClosed, UnknownRollout
from veri.services.proxy.store.database import Tables


@dataclass(frozen=True)
class SessionRow:
    rollout_id: str
    api_key: str
    status: SessionStatus
    metadata: dict[str, Any]
    replica: int = 0


class Sessions(Tables):
    def open_session(self, rollout_id: str | None, metadata: dict[str, Any]) -> SessionRow:
        """A new open session, pinned to the replica with the fewest open sessions (round-robin on ties)."""
        rollout_id = rollout_id or f"r-{uuid.uuid4().hex[:16]}"
        api_key = f"veri-{secrets.token_urlsafe(24)}"
        try:
            with self._write() as db:  # the choice and the insert see no other worker's open
                replica = self._least_loaded_replica()
                db.execute(
                    "INSERT INTO sessions VALUES (?, ?, ?, ?, ?, NULL, ?)",
                    (rollout_id, api_key, SessionStatus.OPEN.value, orjson.dumps(metadata).decode(), time.time(),
                     replica),
                )
        except sqlite3.IntegrityError:
            raise InvalidRequest(f"rollout_id {rollout_id!r} already exists; omit it to get a fresh one") from None
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
