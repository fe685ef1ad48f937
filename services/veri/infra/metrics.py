"""Prometheus pieces every veri server shares: per-route HTTP metrics and the `/metrics` answer.

Labels stay bounded: a request is labelled by its route *template* (`/r/{rollout_id}/v1/messages`),
never by its path, so no rollout id, key or other per-session value becomes a label.

Multiprocess mode (the proxy's `--workers N`): prometheus-client picks how it stores values when it
is first imported, from PROMETHEUS_MULTIPROC_DIR; `MULTIPROCESS_DIR` is read at that same moment, so
this process answers `/metrics` the way its values are stored (its own registry, or every worker's
files summed).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import multiprocess as prometheus_multiprocess

from veri.core import envs

MULTIPROCESS_DIR = os.environ.get(envs.PROMETHEUS_MULTIPROC_DIR) or None

METRICS_PATH = "/metrics"
UNMATCHED_ROUTE = "unmatched"  # a path no route serves (scanners, typos): one label, not one per path

# Seconds; from a cached health check up to a long generation or sandbox run.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


def metrics_payload(registry: CollectorRegistry) -> tuple[bytes, str]:
    """The text exposition of `registry`, or in multiprocess mode of every worker's values summed."""
    if MULTIPROCESS_DIR is None:
        return generate_latest(registry), CONTENT_TYPE_LATEST
    merged = CollectorRegistry()
    prometheus_multiprocess.MultiProcessCollector(merged, path=MULTIPROCESS_DIR)
    return generate_latest(merged), CONTENT_TYPE_LATEST


def worker_exiting() -> None:
    """Drop this worker's live gauges (in-flight requests) from the sum once it stops serving."""
    if MULTIPROCESS_DIR is not None:
        prometheus_multiprocess.mark_process_dead(os.getpid(), path=MULTIPROCESS_DIR)


class RouteMetrics:
    """`<prefix>_requests_in_flight`, `<prefix>_requests_total` and `<prefix>_request_seconds` per route.

    `describe(route)` adds labels that follow from the route (the proxy's protocol); `extra_labels`
    names them. Pure ASGI middleware (`middleware(app)`): a streamed reply stays streamed and counts
    as in flight until its last byte is sent.
    """

    def __init__(self, prefix: str, registry: CollectorRegistry, *, extra_labels: tuple[str, ...] = (),
                 describe: Callable[[str], tuple[str, ...]] | None = None) -> None:
        labels = ("route", *extra_labels)
        self._describe = describe or (lambda route: ())
        self._routes = RouteTemplates()
        self._by_route: dict[str, tuple[Any, Any]] = {}
        self._by_status: dict[tuple[str, int], Any] = {}
        self.in_flight = Gauge(f"{prefix}_requests_in_flight", "requests being served now", labels,
                               registry=registry, multiprocess_mode="livesum")
        self.requests = Counter(f"{prefix}_requests", "requests answered, by HTTP status", (*labels, "status"),
                                registry=registry)
        self.seconds = Histogram(f"{prefix}_request_seconds", "time from request to the reply's last byte",
                                 labels, registry=registry, buckets=LATENCY_BUCKETS)

    def middleware(self, app: Any) -> Callable[..., Any]:
        async def instrumented(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http" or scope["path"] == METRICS_PATH:
                await app(scope, receive, send)
                return
            route = self._routes.of(scope)
            in_flight, seconds = self._children(route)
            status = {"code": 500}  # what a handler that raised past every error handler answers

            async def send_status(message: Any) -> None:
                if message["type"] == "http.response.start":
                    status["code"] = message["status"]
                await send(message)

            started = time.perf_counter()
            in_flight.inc()
            try:
                await app(scope, receive, send_status)
            finally:
                in_flight.dec()
                seconds.observe(time.perf_counter() - started)
                self._answered(route, status["code"]).inc()

        return instrumented

    # `labels()` is most of the bookkeeping's cost; routes and statuses are few, so each child is looked
    # up once (bench/metrics_overhead.py).
    def _children(self, route: str) -> tuple[Any, Any]:
        if route not in self._by_route:
            labels = (route, *self._describe(route))
            self._by_route[route] = (self.in_flight.labels(*labels), self.seconds.labels(*labels))
        return self._by_route[route]

    def _answered(self, route: str, status: int) -> Any:
        key = (route, status)
        if key not in self._by_status:
            self._by_status[key] = self.requests.labels(route, *self._describe(route), str(status))
        return self._by_status[key]


class RouteTemplates:
    """Path -> the template of the route that serves it, from the app's routes (read at the first request,
    when every router is included): one regex, an alternative per route in routing order."""

    def __init__(self) -> None:
        self._templates: list[str] = []
        self._pattern: re.Pattern[str] | None = None

    def of(self, scope: Any) -> str:
        if self._pattern is None:
            self._templates = route_templates(scope["app"].routes)
            alternatives = "|".join(f"({_path_regex(template)})" for template in self._templates)
            self._pattern = re.compile(f"^(?:{alternatives})$")
        found = self._pattern.match(scope["path"])
        return self._templates[found.lastindex - 1] if found and found.lastindex else UNMATCHED_ROUTE


def route_templates(routes: Any) -> list[str]:
    """Every route's path template, in routing order. FastAPI >= 0.160 nests included routers
    (`iter_route_contexts`); older ones (vLLM's pin, in the vLLM images) list them flat."""
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:
        return [path for route in routes if (path := getattr(route, "path_format", None))]
    return [c.path_format for c in iter_route_contexts(routes) if c.path_format]


def _path_regex(template: str) -> str:
    """`/r/{rollout_id}/v1/messages` -> a group-free regex (`{name:path}` spans slashes, as Starlette's)."""
    parts = re.split(r"(\{[^}]+\})", template)
    return "".join(("(?:.*)" if part.endswith(":path}") else "(?:[^/]+)") if part.startswith("{") else re.escape(part)
                   for part in parts)
