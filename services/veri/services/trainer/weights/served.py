"""Which policy servers still serve the weights this job gave them: a restarted server is caught before
the rollouts it served are scored.

A policy server that restarts (killed, out of memory, compose's `restart: unless-stopped`) comes back with
its model folder's weights and answers again. Its spans do not say so: on vLLM they carry the version the
trainer announced to the proxy (`services/proxy/capture.py`), on hf the version the new process counts from 0. The
next weight sync would load the job's weights again, but only after the step had trained on them.

So every server says which process serves (`core.policy_api.ServerProcess`: an id the process makes when
it starts; veri's vLLM worker extension `veri_server_process`, the hf server's `/policy_version`), and
`ServedWeights` keeps, per server, the process that holds the job's weights:

    noted()        after every weight update (vLLM: `vllm_sync.AnnouncedSync`, either sync; hf:
                   `sync.HfWeightSync`): each server's process holds the job's weights from now. One other
                   than the process noted before restarted in between: from when the job last saw the old
                   one until now, it served weights the job did not give it (a window).
    unvouched()    before a step's rollouts are scored: each server is asked again. One whose process is not
                   the one noted restarted since the job last saw it (a window, still open); one that does
                   not answer cannot vouch for anything since. The windows, per proxy replica.

The rollout function rejects a rollout with a span served inside a window of its replica's server
(`policy_server_restarted`). A window starts when the job last saw the old process, not at the new one's
start: a server may restart more than once between two looks. It ends when the job's weights were noted
in the new process (after they were loaded: a call the restarted process served without them started
before). Spans are placed in time by the proxy's clock (their start and duration), windows by the
trainer's: the stack runs on one host; `CLOCK_SLACK_S` moves each window's start earlier, for clocks a
little apart.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from veri.core.policy_api import ServerProcess
from veri.core.records import ReplicaStats, Span
from veri.infra.http import HttpCallError
from veri.services.trainer.errors import WeightSyncError

CLOCK_SLACK_S = 2.0


class ServerProbe(Protocol):
    """A policy server's admin client (`VllmAdmin`, `PolicyAdmin`): which process serves it."""

    @property
    def base_url(self) -> str: ...

    def server_process(self) -> ServerProcess: ...


@dataclass(frozen=True)
class Window:
    """Unix seconds in which a server served weights the job did not give it, and why."""

    server: str
    start: float
    end: float  # math.inf: still
    why: str

    def covers(self, span: Span) -> bool:
        return span.started_at <= self.end and span.started_at + span.duration_s >= self.start


@dataclass(eq=False)  # one per server, looked up by identity
class _Server:
    probe: ServerProbe
    process: ServerProcess | None = None  # the process that holds the job's weights (None: not noted yet)
    seen_at: float = 0.0  # when that process last answered (unix s)
    windows: list[Window] = field(default_factory=list)


class ServedWeights:
    def __init__(self, probes: list[ServerProbe], replicas: Callable[[], list[ReplicaStats]],
                 report: Callable[[str], None]) -> None:
        self._servers = [_Server(probe) for probe in probes]
        self._replicas = replicas  # the proxy's replicas (GET /control/replicas): which server a span's replica is
        self._report = report  # one line to the job log
        self._by_replica: dict[int, list[_Server]] | None = None

    def noted(self) -> None:
        """The weights were just updated: every server's process holds the job's weights from now on."""
        for server in self._servers:
            now = time.time()
            process = self._ask(server)
            if process is None:
                raise WeightSyncError(f"the policy server at {server.probe.base_url} took the weights but does not say"
                                      " which process serves: run the policy image of this veri (vLLM: with"
                                      " --worker-extension-cls veri.services.policy.vllm.worker.WeightReloadExtension)")
            if server.process is not None and process.id != server.process.id:
                why = (f"after it restarted (its new process started at {_clock(process.started_at)}) and before"
                       " the job's weights were loaded into it again")
                # It holds the job's weights since the load that ended just before `now`: a call served
                # before then started before it, so no slack is needed at this end.
                server.windows.append(Window(server.probe.base_url, server.seen_at - CLOCK_SLACK_S, now, why))
                self._report(f"the policy server at {server.probe.base_url} restarted (at"
                             f" {_clock(process.started_at)}) and now holds the job's weights again; the rollouts"
                             " with a span it served meanwhile are rejected (policy_server_restarted)")
            server.process, server.seen_at = process, now

    def unvouched(self) -> dict[int | None, list[Window]]:
        """Every window so far, by the proxy replica whose server it concerns (None: a span naming no
        replica, or one this job cannot place: every window); {} when there is none. Asks each server which
        process serves now."""
        windows: dict[_Server, list[Window]] = {}
        for server in self._servers:
            windows[server] = [*server.windows, *self._open_window(server)]
        if not any(windows.values()):
            return {}  # the usual case: no need to ask the proxy which replica is which server
        by_replica: dict[int | None, list[Window]] = {
            replica: [window for server in servers for window in windows[server]]
            for replica, servers in self._servers_by_replica().items()}
        by_replica[None] = [window for found in windows.values() for window in found]
        return by_replica

    def _open_window(self, server: _Server) -> list[Window]:
        if server.process is None:  # no weights given yet: nothing to vouch for
            return []
        now = time.time()
        process = self._ask(server)
        if process is None:
            return [Window(server.probe.base_url, server.seen_at - CLOCK_SLACK_S, math.inf,
                           "while it did not answer which process serves (it may have restarted)")]
        if process.id != server.process.id:
            return [Window(server.probe.base_url, server.seen_at - CLOCK_SLACK_S, math.inf,
                           f"after it restarted (its new process started at {_clock(process.started_at)}); the next"
                           " weight update loads the job's weights into it again")]
        server.seen_at = now
        return []

    def _ask(self, server: _Server) -> ServerProcess | None:
        try:
            return server.probe.server_process()
        except HttpCallError as error:
            self._report(f"the policy server at {server.probe.base_url} did not say which process serves"
                         f" ({error.outcome}: {error.detail[:200]})")
            return None

    def _servers_by_replica(self) -> dict[int, list[_Server]]:
        """The proxy's replicas -> the servers they are: by URL; by position when the proxy and the trainer
        name the same servers differently (127.0.0.1 and a compose name); otherwise every server."""
        if self._by_replica is None:
            replicas = self._replicas()
            urls = list(dict.fromkeys(_plain(replica.url) for replica in replicas))
            mine = {_plain(server.probe.base_url): server for server in self._servers}
            if set(urls) <= set(mine):
                pick = {url: [mine[url]] for url in urls}
            elif len(urls) == len(self._servers):
                pick = {url: [server] for url, server in zip(urls, self._servers, strict=True)}
            else:
                pick = {url: list(self._servers) for url in urls}
            self._by_replica = {replica.replica: pick[_plain(replica.url)] for replica in replicas}
        return self._by_replica


def _plain(url: str) -> str:
    return url.rstrip("/")


def _clock(unix_s: float) -> str:
    return datetime.fromtimestamp(unix_s).strftime("%H:%M:%S")
