"""The `requests` table: the harness requests the capture path took on, in flight or answered, so a
client's retry finds its first try (answered from its span, or sampled afresh once it failed)."""

from __future__ import annotations

import os
import sqlite3
import time

import structlog

from veri.services.proxy.store.database import Tables, store_error

log = structlog.get_logger("veri.services.proxy.store")


class RequestNotes(Tables):
    _dropped: set[int]

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
