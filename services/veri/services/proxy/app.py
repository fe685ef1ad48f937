"""Assembly of the capture proxy: `create_app(settings)` and `serve(args)`."""

from __future__ import annotations

import gc
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import structlog
from fastapi import Depends, FastAPI, Request, Response
from starlette.exceptions import HTTPException

from veri.infra.gunicorn import serve_under_gunicorn
from veri.infra.logging import AccessLog
from veri.infra.metrics import metrics_payload, worker_exiting
from veri.services.proxy.anthropic.api_router import router as anthropic_router
from veri.services.proxy.capture import CaptureService
from veri.services.proxy.control.api_router import router as control_router
from veri.services.proxy.control.auth import require_control
from veri.services.proxy.deps import json_response
from veri.services.proxy.errors import ProxyError, RouteRefused, anthropic_error_body, openai_error_body
from veri.services.proxy.metrics import ProxyMetrics
from veri.services.proxy.openai.api_router import router as openai_router
from veri.services.proxy.recording import RequestRecorder
from veri.services.proxy.rendering import ChatRendering, model_name
from veri.services.proxy.replicas import PolicyReplicas, plan_replicas
from veri.services.proxy.responses.api_router import router as responses_router
from veri.services.proxy.rollout_routes import ErrorShape, error_shape
from veri.services.proxy.settings import ProxySettings
from veri.services.proxy.store import SpanStore, store_error
from veri.services.proxy.timing import ServerTiming

log = structlog.get_logger("veri.proxy")

# Harness SDKs keep connections open between turns; uvicorn's 5 s default closes them while a tool
# runs, and a client that reuses one just as it closes sees "server disconnected".
KEEP_ALIVE_S = 120

# A call leaves a few dozen containers to the collector, and each young collection walks the lists of
# 8k ids the calls in flight hold (0.3-0.6 ms at 8k tokens): at Python's 700 one call in ~20 paid one.
# At 20,000 it is one in ~500, and the cycles waiting for it stay a few MB.
GC_THRESHOLDS = (20_000, 20, 20)


def create_app(settings: ProxySettings) -> FastAPI:
    metrics = ProxyMetrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = SpanStore(settings.store_dir)
        replicas = plan_replicas(settings.replica_urls, settings.data_parallel_size)
        store.set_replicas(replicas)
        policy = PolicyReplicas(replicas, model=settings.served_model_name, timeout_s=settings.policy_timeout_s)
        await policy.start()
        app.state.model_name = model_name(settings)
        app.state.capture = CaptureService(settings, store, ChatRendering(settings), policy, metrics)
        log.info("proxy ready", policy=settings.replica_urls, replicas=len(replicas), store=str(store.path),
                 model=app.state.model_name)
        # What startup built (transformers, the tokenizer, the renderer) lives as long as the worker: keep
        # it out of every collection, or each full one walks it in the middle of a call (0.4 s seen at 8k).
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        yield
        await policy.aclose()
        store.close()
        worker_exiting()

    app = FastAPI(title="veri capture proxy", lifespan=lifespan)
    app.include_router(openai_router)
    app.include_router(anthropic_router)
    app.include_router(responses_router)
    app.include_router(control_router)
    app.state.settings = settings  # what the control routes' token check reads (control/auth.py)
    app.state.metrics = metrics

    @app.get("/metrics", dependencies=[Depends(require_control)])
    async def prometheus_metrics() -> Response:
        body, content_type = metrics_payload(metrics.registry)
        return Response(body, media_type=content_type)

    app.add_middleware(metrics.routes.middleware)
    app.add_middleware(RequestRecorder)
    app.add_middleware(AccessLog)
    app.add_middleware(ServerTiming)

    @app.exception_handler(ProxyError)
    async def proxy_error(request: Request, error: ProxyError) -> Response:
        # Each route's declared error shape (`rollout_routes.py`); the Anthropic SDK reads `error.type`.
        anthropic = error_shape(request.url.path) is ErrorShape.ANTHROPIC
        body = anthropic_error_body(error) if anthropic else openai_error_body(error)
        metrics.refused(error)
        log.info("request refused", path=request.url.path, status=error.status_code, reason=error.message)
        return json_response(body, status_code=error.status_code)

    @app.exception_handler(sqlite3.Error)
    async def store_refused(request: Request, error: sqlite3.Error) -> Response:
        # A store write on the request path other than the span's own (those map their errors already).
        return await proxy_error(request, store_error(error, "the span store refused a write"))

    @app.exception_handler(HTTPException)
    async def route_refused(request: Request, error: HTTPException) -> Response:
        # No such route or method: in the protocol's shape too, so an SDK reports it as an API error.
        return await proxy_error(request, RouteRefused.of(request.method, request.url.path, error.status_code,
                                                                str(error.detail)))

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    return app


def serve(settings: ProxySettings, *, host: str, port: int, workers: int) -> None:
    """Under gunicorn, whatever `--workers`: a worker that dies is replaced, the session goes on.

    Several workers share nothing but the span store, which holds every session's state, and this
    start's metrics folder, where each worker writes its values for any worker's /metrics to sum
    (`veri serve proxy` sets it before prometheus-client is imported)."""
    def worker_exited(pid: int) -> None:
        # A worker killed mid-call leaves its tries in flight: a retry of one must not wait for it.
        store = SpanStore(settings.store_dir)
        try:
            if dropped := store.drop_requests_of_worker(pid):
                log.warning("worker died mid-call: its calls in flight dropped (a retry samples afresh)",
                            worker_pid=pid, calls=dropped)
        finally:
            store.close()

    serve_under_gunicorn(lambda: create_app(settings), name="proxy", host=host, port=port,
                         workers=workers, keep_alive_s=KEEP_ALIVE_S, on_worker_exit=worker_exited)
