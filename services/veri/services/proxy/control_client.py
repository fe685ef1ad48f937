"""Synchronous client for the proxy's control routes (used by `veri session` and the trainer): typed
calls over veri.infra.http.JsonClient."""

from __future__ import annotations

from typing import Any

from veri.core.records import CaptureConfig, RecordedRequest, ReplicaStats, SessionCreate, SessionInfo, Span
from veri.infra.http import HttpCallError, JsonClient


class ControlError(HttpCallError):
    """The proxy refused or missed a control call (see veri.infra.http for the message)."""


class ControlClient:
    def __init__(self, base_url: str, *, token: str | None = None, timeout_s: float = 30.0):
        # No keep-alive: control calls are few, and a reused connection the server is just closing
        # fails a POST that must not be retried blindly (it would open a second session).
        self._json = JsonClient(base_url, service="capture proxy", token=token, timeout_s=timeout_s,
                                keepalive=False, error=ControlError,
                                unreachable_fix="start it first (make up), or pass its URL: --proxy-url")

    def open_session(self, rollout_id: str | None = None, metadata: dict[str, Any] | None = None,
                     *, record_requests: bool = False) -> SessionInfo:
        body = SessionCreate(rollout_id=rollout_id, metadata=metadata or {},
                             record_requests=record_requests).model_dump(exclude_none=True)
        return SessionInfo.model_validate(self._call("POST", "/control/sessions", json=body))

    def spans(self, rollout_id: str) -> list[Span]:
        return [Span.model_validate(span) for span in self._call("GET", f"/control/sessions/{rollout_id}/spans")]

    def recorded_requests(self, rollout_id: str) -> list[RecordedRequest]:
        return [RecordedRequest.model_validate(request)
                for request in self._call("GET", f"/control/sessions/{rollout_id}/requests")]

    def capture_config(self) -> CaptureConfig:
        return CaptureConfig.model_validate(self._call("GET", "/control/config"))

    def close_session(self, rollout_id: str) -> SessionInfo:
        return SessionInfo.model_validate(self._call("POST", f"/control/sessions/{rollout_id}/close"))

    def replicas(self) -> list[ReplicaStats]:
        return [ReplicaStats.model_validate(stats) for stats in self._call("GET", "/control/replicas")]

    def set_policy_version(self, version: int) -> None:
        self._call("PUT", "/control/policy_version", json={"version": version})

    def _call(self, method: str, path: str, json: Any = None) -> Any:
        return self._json.call(method, path, json=json)
