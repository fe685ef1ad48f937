"""The `recorded_sessions` and `recorded_requests` tables: a session's requests as the harness sent them
(`veri replay record`)."""

from __future__ import annotations

import time
from typing import Any

import orjson

from veri.core.records import RecordedRequest
from veri.services.proxy.store.database import Tables


class RecordedRequests(Tables):
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
        with self._write() as db:
            (seq,) = db.execute(
                "SELECT COALESCE(MAX(seq) + 1, 0) FROM recorded_requests WHERE rollout_id = ?", (rollout_id,)
            ).fetchone()
            db.execute("INSERT INTO recorded_requests VALUES (?, ?, ?, ?, NULL, NULL)",
                       (rollout_id, seq, orjson.dumps(request).decode(), body))
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
