"""Client for the hf policy server's weight routes: `GET /policy_version`, `POST /update_weights`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from veri.core.policy_api import PolicyVersionResponse, UpdateWeightsRequest


class PolicyAdminError(RuntimeError):
    pass


class PolicyAdmin:
    def __init__(self, base_url: str, *, timeout_s: float = 600.0) -> None:
        # Long timeout: the server applies an update between decode steps, after in-flight rows finish.
        self._http = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout_s)

    def policy_version(self) -> int:
        return PolicyVersionResponse.model_validate(self._call("GET", "/policy_version")).policy_version

    def update_weights(self, path: Path, version: int | None = None) -> int:
        """Load the safetensors at `path` (a path the *server* can read) as `version` (default: the
        server's next); returns the new policy version."""
        body = UpdateWeightsRequest(path=str(path), policy_version=version).model_dump(exclude_none=True)
        return PolicyVersionResponse.model_validate(self._call("POST", "/update_weights", json=body)).policy_version

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            reply = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise PolicyAdminError(f"policy server at {self._http.base_url} unreachable: {exc}") from exc
        if reply.status_code != 200:
            raise PolicyAdminError(f"{method} {path} -> {reply.status_code}: {reply.text[:500]}")
        return reply.json()
