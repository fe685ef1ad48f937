"""Client for the hf policy server's weight routes: `GET /policy_version` (also its process: `server_process`),
`POST /update_weights`."""

from __future__ import annotations

import os
from pathlib import Path

from veri.core import envs
from veri.core.policy_api import PolicyVersionResponse, ServerProcess, UpdateWeightsRequest
from veri.infra.http import HttpCallError, JsonClient

CONNECT_RETRIES = 7  # httpx's backoff 0, 0.5, 1 ... 16 s: about 30 s in all


class PolicyAdminError(HttpCallError):
    """The policy server refused or missed a weight call (see veri.infra.http for the message)."""


class PolicyAdmin:
    def __init__(self, base_url: str, *, timeout_s: float = 600.0, token: str | None = None) -> None:
        # Long timeout: the server applies an update between decode steps, after in-flight rows finish.
        # A restarting server refuses connections for a while: those are retried (they never reached it).
        # The weight route wants the stack's control token (the trainer's environment carries it).
        token = token or os.environ.get(envs.VERI_CONTROL_TOKEN) or None
        self._json = JsonClient(base_url, service="policy server", token=token, timeout_s=timeout_s,
                                error=PolicyAdminError,
                                retries=CONNECT_RETRIES,
                                unreachable_fix="start it first (make up), or pass its URL: --policy-url")

    @property
    def base_url(self) -> str:
        return self._json.base_url

    def policy_version(self) -> int:
        return PolicyVersionResponse.model_validate(self._json.call("GET", "/policy_version")).policy_version

    def server_process(self) -> ServerProcess:
        """The server's process (another answer than before: it restarted)."""
        reply = PolicyVersionResponse.model_validate(self._json.call("GET", "/policy_version"))
        if reply.process is None:
            raise PolicyAdminError("policy server", self.base_url, "GET", "/policy_version", 200,
                                   "its answer names no process", "run the policy server of this veri")
        return reply.process

    def update_weights(self, path: Path, version: int | None = None) -> int:
        """Load the safetensors at `path` (a path the *server* can read) as `version` (default: the
        server's next); returns the new policy version."""
        body = UpdateWeightsRequest(path=str(path), policy_version=version).model_dump(exclude_none=True)
        reply = self._json.call("POST", "/update_weights", json=body)
        return PolicyVersionResponse.model_validate(reply).policy_version

    def close(self) -> None:
        self._json.close()
