"""Where one call's time went, in its reply's `Server-Timing` header (the standard one browsers show).

    server-timing: total;dur=3.10, cpu;dur=2.41, request;dur=0.40, render;dur=0.82, policy;dur=0.91,
                   span;dur=0.52, gc;dur=0

`total` is request in to the reply's first byte in this worker; `cpu` the worker thread's CPU in that
time (total much above cpu plus `policy`: the worker waited for a core, or for SQLite's lock);
`request` reads, checks and authorizes the body, `render` plans the prompt, `policy` is the policy
call (with the version reads around it), `span` stores the span; `gc` the collector's pauses in
between. Durations in ms. `bench/proxy_overhead.py` reads it to say where a slow call's time went;
it costs a few perf_counter reads a call.

The same middleware names the worker process that served the call (`x-veri-proxy-pid`), so a
multi-worker proxy can be shown to spread calls (tests/proxy/test_openai_sdk.py) and a stuck worker
can be found in `ps`: one middleware hop for both headers.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

HEADER = b"server-timing"
WORKER_PID_HEADER = "x-veri-proxy-pid"


class _GcPauses:
    """The process's collector pauses so far (gc.callbacks: start and stop of each collection)."""

    def __init__(self) -> None:
        self.total_s = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.total_s += time.perf_counter() - self._started


GC_PAUSES = _GcPauses()
gc.callbacks.append(GC_PAUSES)


class CallTimings:
    __slots__ = ("_cpu", "_gc", "_started", "phases")

    def __init__(self) -> None:
        self._started = time.perf_counter()
        self._cpu = time.thread_time()
        self._gc = GC_PAUSES.total_s
        self.phases: dict[str, float] = {}

    def header(self) -> bytes:
        fields = {"total": time.perf_counter() - self._started, "cpu": time.thread_time() - self._cpu,
                  **self.phases, "gc": GC_PAUSES.total_s - self._gc}
        return ", ".join(f"{name};dur={seconds * 1000:.2f}" for name, seconds in fields.items()).encode()


_CURRENT: ContextVar[CallTimings | None] = ContextVar("veri_proxy_call_timings", default=None)


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Time a phase of the current call (nothing outside a call)."""
    timings = _CURRENT.get()
    if timings is None:
        yield
        return
    started = time.perf_counter()
    try:
        yield
    finally:
        timings.phases[name] = timings.phases.get(name, 0.0) + time.perf_counter() - started


class ServerTiming:
    """Pure ASGI middleware (no buffering: streamed replies stay streamed): times each HTTP call and adds
    its header, and the worker's pid, when the reply starts."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        timings = CallTimings()
        token = _CURRENT.set(timings)

        async def send_with_timings(message: Any) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (HEADER, timings.header()),
                                      (WORKER_PID_HEADER.encode(), str(os.getpid()).encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_timings)
        finally:
            _CURRENT.reset(token)
