"""Client for a vLLM policy server's weight routes (vLLM's dev routes: `VLLM_SERVER_DEV_MODE=1`).

    reload_weights(folder)   POST /collective_rpc {"method": "veri_reload_weights", "args": [folder]}:
                             every worker loads the folder's safetensors (veri.services.policy.vllm.worker)
    reset_prefix_cache()     POST /reset_prefix_cache: no cached prefix computed with the old weights
    sleep() / wake_up(tag)   POST /sleep?level=1, /wake_up?tags=T (vllm_sleep_mode): the engine pauses; with
                             --enable-sleep-mode (CUDA) the weights go to host memory and the KV cache is
                             freed, and come back tag by tag ("weights", then "kv_cache")
    is_sleeping()            GET /is_sleeping
    pause() / resume()       POST /pause?mode=keep, /resume (max_staleness >= 1): requests in flight are held
                             while the weights move, then go on
    is_paused()              GET /is_paused (a server a dead trainer left paused holds every request)
    loaded_weights()         POST /collective_rpc {"method": "veri_loaded_weights"}: the folder each worker
                             last loaded (None: none since it started, i.e. it serves the model folder's)
    server_process()         POST /collective_rpc {"method": "veri_server_process"}: which processes serve
                             (another answer than before: the server restarted)

Every call is bounded (`Bounds`): connecting takes at most `connect_s`, a reload at most `timeout_s`
(the job's `weight_sync_timeout_s`), every other call at most `control_s`. A call past its bound, or
one the server cut off (killed, restarted), raises `VllmAdminError` with no status ("no answer").
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from pydantic import ValidationError

from veri.core.policy_api import ServerProcess
from veri.infra.http import HttpCallError, JsonClient
from veri.services.policy.vllm import WORKER_EXTENSION

RELOAD_METHOD = "veri_reload_weights"  # veri.services.policy.vllm.worker.WeightReloadExtension
LOADED_METHOD = "veri_loaded_weights"
PROCESS_METHOD = "veri_server_process"
CONNECT_S = 10.0  # a server that is up accepts at once; a dead one refuses at once; this bounds the rest
CONTROL_S = 60.0  # pause, resume, sleep, wake, reset: quick calls (vLLM answers them between engine steps)
RESET_TRIES = 5  # vLLM refuses a reset while blocks are held (a request just finishing): try again


class VllmAdminError(HttpCallError):
    """A vLLM policy server refused or missed a weight call (see veri.infra.http for the message)."""


@dataclass(frozen=True)
class Bounds:
    """Seconds each kind of call may take at most (see the module docstring)."""

    reload_s: float
    control_s: float = CONTROL_S
    connect_s: float = CONNECT_S

    def timeout(self, seconds: float) -> httpx.Timeout:
        return httpx.Timeout(seconds, connect=min(self.connect_s, seconds))


class VllmAdmin:
    def __init__(self, base_url: str, *, timeout_s: float, control_s: float = CONTROL_S,
                 connect_s: float = CONNECT_S, transport: httpx.BaseTransport | None = None) -> None:
        self.timeout_s = timeout_s
        self.bounds = Bounds(timeout_s, min(control_s, timeout_s), connect_s)
        self._control = self.bounds.timeout(self.bounds.control_s)
        self._json = JsonClient(base_url, service="vLLM policy server", timeout_s=self._control,
                                error=VllmAdminError,
                                unreachable_fix="is it running? `make logs` shows its log", transport=transport)

    @property
    def base_url(self) -> str:
        return self._json.base_url

    def reload_weights(self, folder: Path) -> list[dict[str, Any]]:
        """Every worker's answer (`veri_reload_weights`: folder, fingerprint, what it re-tied)."""
        body = {"method": RELOAD_METHOD, "args": [str(folder)], "timeout": self.timeout_s}
        return self._results(body, self.bounds.timeout(self.timeout_s))

    def loaded_weights(self) -> list[dict[str, Any] | None]:
        """Each worker's last load (`veri_loaded_weights`: {"folder", "fingerprint"}, None before any)."""
        body = {"method": LOADED_METHOD, "args": [], "timeout": self.bounds.control_s}
        return self._results(body, self._control)

    def server_process(self) -> ServerProcess:
        """The server's process, as its workers answer (`veri_server_process`): their ids joined, the latest
        start. vLLM runs the call on every worker (tensor parallel: one each)."""
        body = {"method": PROCESS_METHOD, "args": [], "timeout": self.bounds.control_s}
        answers = self._results(body, self._control)
        try:
            workers = [ServerProcess.model_validate(answer) for answer in answers]
        except ValidationError as error:
            raise VllmAdminError("vLLM policy server", self.base_url, "POST", "/collective_rpc", 200,
                                 f"{str(answers)[:300]!r} is not what {PROCESS_METHOD} answers",
                                 f"run it with --worker-extension-cls {WORKER_EXTENSION}") from error
        if not workers:
            raise VllmAdminError("vLLM policy server", self.base_url, "POST", "/collective_rpc", 200,
                                 "no worker answered", "its log (`make logs`) says why")
        return ServerProcess(id="+".join(sorted(worker.id for worker in workers)),
                             started_at=max(worker.started_at for worker in workers))

    def _results(self, body: dict[str, Any], timeout: httpx.Timeout) -> list[Any]:
        reply = self._json.call("POST", "/collective_rpc", json=body, timeout_s=timeout)
        results = reply.get("results") if isinstance(reply, dict) else None
        if not isinstance(results, list):
            raise VllmAdminError("vLLM policy server", self.base_url, "POST", "/collective_rpc", 200,
                                 f"no results list in {str(reply)[:300]!r}",
                                 "is this URL a vLLM server with VLLM_SERVER_DEV_MODE=1?")
        return results

    def reset_prefix_cache(self) -> bool:
        for attempt in range(RESET_TRIES):
            if self._json.call("POST", "/reset_prefix_cache")["success"]:
                return True
            time.sleep(0.2 * (attempt + 1))
        return False

    def pause(self) -> None:
        """Hold every request where it is (vLLM's `mode=keep`, as TRL's async trainer does): none is aborted,
        each goes on after `resume` with the new weights."""
        self._json.command("POST", "/pause", params={"mode": "keep"})

    def resume(self) -> None:
        self._json.command("POST", "/resume")

    def is_paused(self) -> bool:
        reply = self._json.call("GET", "/is_paused")
        return bool(reply.get("is_paused")) if isinstance(reply, dict) else False

    def sleep(self, level: int = 1) -> None:
        self._json.command("POST", "/sleep", params={"level": str(level)})

    def wake_up(self, tag: str | None = None) -> None:
        self._json.command("POST", "/wake_up", params={"tags": tag} if tag else None)

    def is_sleeping(self) -> bool:
        return bool(self._json.call("GET", "/is_sleeping")["is_sleeping"])

    def close(self) -> None:
        self._json.close()
