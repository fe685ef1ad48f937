"""The launcher's Prometheus metrics and its `GET /metrics` (the launcher's token, when it has one).

    veri_launcher_requests_in_flight{route}                  requests being served (a group's POST waits
    veri_launcher_requests_total{route,status}               for its last sandbox)
    veri_launcher_request_seconds{route}
    veri_launcher_sandbox_launches_total{backend}            sandboxes started
    veri_launcher_sandbox_results_total{backend,status}      ended: completed / failed / truncated / cancelled
    veri_launcher_sandbox_failures_total{backend,reason}     exit_nonzero, timeout, infrastructure_error, cancelled
    veri_launcher_sandbox_seconds{backend,status}            launch -> result
    veri_launcher_sandboxes_running{backend}                 sandboxes alive now

`MeteredBackend` wraps the backend behind the launcher's gate, so "running" counts sandboxes that
passed it (waiting ones are not running yet). Labels are bounded: no rollout id, image or job name.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from fastapi import APIRouter, Depends, Request, Response
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from veri.core.episodes import RolloutStatus
from veri.core.launch import LaunchResult, RolloutLaunch
from veri.infra.metrics import LATENCY_BUCKETS, RouteMetrics, metrics_payload
from veri.services.launcher.backend import SandboxBackend
from veri.services.launcher.deps import require_token

CANCELLED = "cancelled"  # the trainer went away mid-group: the sandbox was removed before its end


def failure_reason(result: LaunchResult) -> str | None:
    if result.status is RolloutStatus.TRUNCATED:
        return "timeout"
    if result.status is RolloutStatus.FAILED:
        return "infrastructure_error" if result.infrastructure_error else "exit_nonzero"
    return None


class LauncherMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.routes = RouteMetrics("veri_launcher", self.registry)
        self.launches = Counter("veri_launcher_sandbox_launches", "sandboxes started", ("backend",),
                                registry=self.registry)
        self.results = Counter("veri_launcher_sandbox_results", "sandboxes ended, by rollout status",
                               ("backend", "status"), registry=self.registry)
        self.failures = Counter("veri_launcher_sandbox_failures", "sandboxes that did not complete, by reason",
                                ("backend", "reason"), registry=self.registry)
        self.seconds = Histogram("veri_launcher_sandbox_seconds", "a sandbox's run, launch to result",
                                 ("backend", "status"), registry=self.registry, buckets=LATENCY_BUCKETS)
        self.running = Gauge("veri_launcher_sandboxes_running", "sandboxes alive now", ("backend",),
                             registry=self.registry)

    def ended(self, backend: str, status: str, reason: str | None, seconds: float) -> None:
        self.results.labels(backend, status).inc()
        if reason is not None:
            self.failures.labels(backend, reason).inc()
        self.seconds.labels(backend, status).observe(seconds)


class MeteredBackend:
    """A backend whose every sandbox is counted, timed and tracked while it runs."""

    def __init__(self, inner: SandboxBackend, metrics: LauncherMetrics) -> None:
        self.inner = inner
        self.name = inner.name
        self.runtime = inner.runtime
        self.metrics = metrics
        for status in (*RolloutStatus, CANCELLED):  # zeros shown before the first sandbox
            metrics.results.labels(self.name, status)
        metrics.launches.labels(self.name)
        metrics.running.labels(self.name)

    async def run(self, launch: RolloutLaunch, output_dir: Path) -> LaunchResult:
        metrics, started = self.metrics, time.perf_counter()
        metrics.launches.labels(self.name).inc()
        metrics.running.labels(self.name).inc()
        try:
            result = await self.inner.run(launch, output_dir)
        except asyncio.CancelledError:
            metrics.ended(self.name, CANCELLED, CANCELLED, time.perf_counter() - started)
            raise
        except Exception:  # run_group turns it into a failed result with infrastructure_error
            metrics.ended(self.name, RolloutStatus.FAILED, "infrastructure_error", time.perf_counter() - started)
            raise
        finally:
            metrics.running.labels(self.name).dec()
        metrics.ended(self.name, result.status, failure_reason(result), time.perf_counter() - started)
        return result

    async def remove_leftovers(self) -> int:
        return await self.inner.remove_leftovers()

    def close(self) -> None:
        self.inner.close()


def launcher_metrics(request: Request) -> LauncherMetrics:
    return request.app.state.metrics


router = APIRouter()


@router.get("/metrics", dependencies=[Depends(require_token)])
async def metrics(request: Request) -> Response:
    body, content_type = metrics_payload(launcher_metrics(request).registry)
    return Response(body, media_type=content_type)
