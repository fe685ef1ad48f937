"""The hf policy server: `create_app(settings)` assembles it, `serve(...)` runs it under uvicorn."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import structlog
import torch
import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from veri.core.policy_api import ServerProcess
from veri.infra.logging import AccessLog, configure_service_logging
from veri.services.policy.hf.batcher import Batcher
from veri.services.policy.hf.errors import PolicyError, error_body, error_response
from veri.services.policy.hf.loader import load_model
from veri.services.policy.hf.metrics import PolicyMetrics
from veri.services.policy.hf.metrics import router as metrics_router
from veri.services.policy.hf.routes import attach_router
from veri.services.policy.hf.scripted import ScriptedReplies
from veri.services.policy.hf.serving import CompletionServing
from veri.services.policy.hf.settings import PolicySettings

log = structlog.get_logger(__name__)


def create_app(settings: PolicySettings) -> FastAPI:
    metrics = PolicyMetrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        _build_state(app, settings)
        metrics.watch(app.state.batcher)
        app.state.batcher.start()
        log.info("policy server ready", model=settings.model_name, threads=settings.threads)
        try:
            yield
        finally:
            app.state.batcher.stop()

    app = FastAPI(title="veri policy (hf backend)", lifespan=lifespan)
    attach_router(app)
    app.include_router(metrics_router)
    app.state.metrics = metrics
    app.add_middleware(metrics.routes.middleware)
    app.add_middleware(AccessLog)
    _register_errors(app)
    return app


def _build_state(app: FastAPI, settings: PolicySettings) -> None:
    """Load the model and build the service objects the routes use, once, onto `app.state`."""
    torch.set_num_threads(settings.threads)
    model = load_model(settings.model_dir, name=settings.model_name, dtype=settings.dtype)
    batcher = Batcher(model.model, max_batch_rows=settings.max_batch_rows, threads=settings.threads)
    scripted = None
    if settings.scripted_replies is not None:
        scripted = ScriptedReplies.load(settings.scripted_replies, model.tokenizer)
        log.warning("scripted replies on (test-only)", script=str(settings.scripted_replies), rules=len(scripted.rules))
    app.state.settings = settings
    app.state.started = int(time.time())
    # a restarted server answers another id (services/trainer/weights/served.py)
    app.state.process = ServerProcess.new()
    app.state.model = model
    app.state.batcher = batcher
    app.state.serving = CompletionServing(
        model,
        batcher,
        max_batch_rows=settings.max_batch_rows,
        max_logprobs=settings.max_logprobs,
        scripted=scripted,
    )


def _register_errors(app: FastAPI) -> None:
    """Every error leaves in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`."""

    @app.exception_handler(PolicyError)
    async def policy_error(_: Request, exc: PolicyError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def invalid_body(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        if any(err.get("type") == "json_invalid" for err in errors):
            message, param = f"request body is not valid JSON: {errors[0].get('ctx', {}).get('error', '')}", None
        else:
            message = "; ".join(_describe(err) for err in errors[:5]) or "invalid request body"
            param = _location(errors[0]) if errors else None
        body = error_body(message, error_type="BadRequestError", status=400, param=param)
        return JSONResponse(body, status_code=400)

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        body = error_body(str(exc.detail), error_type="HTTPError", status=exc.status_code)
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", path=request.url.path)
        body = error_body(f"{type(exc).__name__}: {exc}", error_type="InternalServerError", status=500)
        return JSONResponse(body, status_code=500)


def _location(error: dict) -> str | None:
    return ".".join(str(part) for part in error.get("loc", ()) if part != "body") or None


def _describe(error: dict) -> str:
    loc = _location(error)
    return f"{loc}: {error.get('msg')}" if loc else str(error.get("msg"))


def serve(*, model_dir: Path, host: str = "127.0.0.1", port: int = 8001, **options: object) -> None:
    """Run the server in the foreground. `options` are further `PolicySettings` fields."""
    configure_service_logging("policy", libraries=("transformers",))
    settings = PolicySettings(model_dir=model_dir, host=host, port=port, **options)
    torch.set_num_interop_threads(1)
    # log_config=None: uvicorn keeps the JSON stream's handlers; AccessLog writes each request.
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="info", log_config=None,
                access_log=False)
