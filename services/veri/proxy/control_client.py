"""Synchronous client for the proxy's control routes (used by `veri session` and the trainer)."""

from __future__ import annotations

from typing import Any

import httpx

from veri.core.records import SessionCreate, SessionInfo, Span


class ControlError(RuntimeError):
    pass


class ControlClient:
    def __init__(self, base_url: str, *, token: str | None = None, timeout_s: float = 30.0):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        # No keep-alive: control calls are few, and a reused connection the server is just closing
        # fails a POST that must not be retried blindly (it would open a second session).
        self._http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s,
                                  limits=httpx.Limits(max_keepalive_connections=0))

    def open_session(self, rollout_id: str | None = None, metadata: dict[str, Any] | None = None) -> SessionInfo:
        body = SessionCreate(rollout_id=rollout_id, metadata=metadata or {}).model_dump(exclude_none=True)
        return SessionInfo.model_validate(self._call("POST", "/control/sessions", json=body))

    def spans(self, rollout_id: str) -> list[Span]:
        return [Span.model_validate(span) for span in self._call("GET", f"/control/sessions/{rollout_id}/spans")]

    def close_session(self, rollout_id: str) -> SessionInfo:
        return SessionInfo.model_validate(self._call("POST", f"/control/sessions/{rollout_id}/close"))

    def set_policy_version(self, version: int) -> None:
        self._call("PUT", "/control/policy_version", json={"version": version})

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            reply = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ControlError(f"proxy at {self._http.base_url} unreachable: {exc}") from exc
        if reply.status_code != 200:
            raise ControlError(f"{method} {path} -> {reply.status_code}: {reply.text[:500]}")
        return reply.json()
