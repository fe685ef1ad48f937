"""Keeping a rollout's requests exactly as the harness sent them, for `veri replay`.

A pure ASGI middleware (nothing buffered for other sessions, streamed replies stay streamed): for a
rollout route of a session that records (opened with `record_requests`, or every session when the
proxy runs with --record-requests) it reads the body, stores the request in the span store *before*
the route runs (so the store's order is the arrival order), and the status and time when the answer
starts. The rollout's key is not kept: a replay presents its own session's key the same way.
"""

from __future__ import annotations

import re
import time
from typing import Any

from cachetools import FIFOCache

from veri.services.proxy.capture import CaptureService

_ROLLOUT_ROUTE = re.compile(r"^/r/(?P<rollout_id>[^/]+)(?P<path>/.*)$")

# Not part of what the harness said: its secret, and what the connection (not the client) decides.
_DROPPED_HEADERS = {"authorization", "x-api-key", "host", "content-length", "connection", "keep-alive",
                    "transfer-encoding", "cookie"}


# Whether a session records is fixed when it opens, so each worker asks the store once per rollout.
_KNOWN_SESSIONS = 65536


class RequestRecorder:
    def __init__(self, app: Any) -> None:
        self.app = app
        self._recording: FIFOCache[str, bool] = FIFOCache(maxsize=_KNOWN_SESSIONS)  # the oldest goes first

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        match = _ROLLOUT_ROUTE.match(scope["path"]) if scope["type"] == "http" else None
        if match is None or not self._records(scope["app"].state.capture, match["rollout_id"]):
            await self.app(scope, receive, send)
            return
        capture: CaptureService = scope["app"].state.capture
        body, complete = await _read_body(receive, capture.settings.max_body_bytes)
        if not complete:  # too large: the route refuses it; nothing worth replaying
            await self.app(scope, _replayed(body, receive, more=True), send)
            return
        rollout_id = match["rollout_id"]
        seq = capture.store.add_request(rollout_id, _request(scope, match["path"]), body)

        async def send_recording_status(message: Any) -> None:
            if message["type"] == "http.response.start":
                capture.store.set_request_status(rollout_id, seq, message["status"])
            await send(message)

        await self.app(scope, _replayed(body, receive, more=False), send_recording_status)

    def _records(self, capture: CaptureService, rollout_id: str) -> bool:
        known = self._recording.get(rollout_id)
        if known is None:
            found = capture.store.records_requests(rollout_id)
            if found is None:  # no such session: the route answers 404; it may be opened later
                return False
            known = found or capture.settings.record_requests
            self._recording[rollout_id] = known
        return known


def _request(scope: Any, path: str) -> dict[str, Any]:
    headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
    auth = "x-api-key" if "x-api-key" in headers else "bearer" if "authorization" in headers else None
    return {
        "method": scope["method"],
        "path": path,
        "query": scope.get("query_string", b"").decode("latin-1"),
        "headers": {name: value for name, value in headers.items() if name not in _DROPPED_HEADERS},
        "auth": auth,
        "received_at": time.time(),
    }


async def _read_body(receive: Any, limit: int) -> tuple[bytes, bool]:
    """The whole body, or (what was read, False) once it passes `limit`."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client went away
            return b"".join(chunks), False
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        if size > limit:
            return b"".join(chunks), False
        if not message.get("more_body", False):
            return b"".join(chunks), True


def _replayed(body: bytes, receive: Any, *, more: bool) -> Any:
    """A receive that hands the route the body already read, then the connection's own messages."""
    sent = False

    async def replay() -> Any:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": more}
        return await receive()

    return replay

