"""`create_app(settings)`: the console app (pages, JSON API, static files, error pages); `serve` runs it."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from prometheus_client import CollectorRegistry, Gauge
from starlette.exceptions import HTTPException

from veri.archive import IndexOutdated, JobStatus
from veri.infra.logging import AccessLog
from veri.infra.metrics import METRICS_PATH, RouteMetrics, metrics_payload
from veri.services.console import api_router, pages
from veri.services.console.errors import NotFound
from veri.services.console.guard import ConsoleGuard
from veri.services.console.jobs import UNKNOWN
from veri.services.console.protocol import BadQuery
from veri.services.console.serving import ConsoleService
from veri.services.console.settings import ConsoleSettings

HERE = Path(__file__).parent
KEEP_ALIVE_S = 5  # uvicorn's default: a browser's idle connections are not held
ROUTES_HELP = ["/ (the jobs)", "/jobs/<job>", "/jobs/<job>/tasks/<task>",
               "/jobs/<job>/steps/<step>/tasks/<task>/rollouts/<rollout>[/tokens]", "/api/jobs"]


def create_app(settings: ConsoleSettings) -> FastAPI:
    app = FastAPI(title="veri console", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(AccessLog)
    app.state.console = ConsoleService(settings)
    app.state.templates = templates()
    app.include_router(api_router.router)
    app.include_router(pages.router)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    registry = CollectorRegistry()
    app.add_middleware(RouteMetrics("veri_console", registry).middleware)
    # Outermost: a foreign Host or a missing token is refused before anything else runs.
    app.add_middleware(ConsoleGuard, allowed_hosts=settings.allowed_hosts, token=settings.token)
    jobs = Gauge("veri_console_jobs", "job folders under <state>/jobs, by status", ["status"], registry=registry)

    @app.get(METRICS_PATH)
    def metrics() -> Response:
        """Prometheus: the console's own requests per route, and the jobs by status (read at each scrape)."""
        found = [job.status for job in app.state.console.jobs()]
        for status in [*JobStatus, UNKNOWN]:
            jobs.labels(str(status)).set(found.count(str(status)))
        body, content_type = metrics_payload(registry)
        return Response(body, media_type=content_type)

    @app.exception_handler(NotFound)
    def not_found(request: Request, error: NotFound) -> Response:
        return _error(request, 404, f"No {error.what}.", error.exists, error.hint)

    @app.exception_handler(BadQuery)
    def bad_query(request: Request, error: BadQuery) -> Response:
        return _error(request, 400, str(error), [], "fix that field of the query")

    @app.exception_handler(RequestValidationError)
    def bad_path(request: Request, error: RequestValidationError) -> Response:
        fields = ", ".join(str(item["loc"][-1]) for item in error.errors())
        return _error(request, 400, f"{fields}: give a whole number", [], "steps, tasks and rollouts are numbers")

    @app.exception_handler(IndexOutdated)
    def outdated(request: Request, error: IndexOutdated) -> Response:
        return _error(request, 503, str(error), [], "")

    @app.exception_handler(HTTPException)
    def http_error(request: Request, error: HTTPException) -> Response:
        if error.status_code == 404:
            return _error(request, 404, f"No page at {request.url.path}.", ROUTES_HELP, "the console's pages")
        if error.status_code == 405:
            return _error(request, 405, "The console is read-only: only GET.", [], "", headers=error.headers)
        return _error(request, error.status_code, str(error.detail), [], "", headers=error.headers)

    return app


def _error(request: Request, status: int, message: str, exists: list[str], hint: str,
           headers: Mapping[str, str] | None = None) -> Response:
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": message, "exists": exists, "hint": hint}, status_code=status, headers=headers)
    page = request.app.state.templates.get_template("error.html").render(
        request=request, status=status, message=message, exists=exists, hint=hint)
    return HTMLResponse(page, status_code=status, headers=headers)


def templates() -> Jinja2Templates:
    found = Jinja2Templates(directory=HERE / "templates")
    found.env.filters |= {"when": _when, "duration": _duration, "number": _number}
    found.env.globals["sparkline"] = sparkline
    return found


def sparkline(values: list[float | None], width: int = 120, height: int = 24) -> str:
    """SVG polyline points of a series (None skipped), scaled into width x height ('' when under 2 points)."""
    points = [(i, v) for i, v in enumerate(values) if v is not None and math.isfinite(v)]
    if len(points) < 2:
        return ""
    low, high = min(v for _, v in points), max(v for _, v in points)
    span, last = (high - low) or 1.0, max(len(values) - 1, 1)
    return " ".join(f"{i * width / last:.1f},{height - 2 - (v - low) * (height - 4) / span:.1f}" for i, v in points)


def _when(stamp: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(stamp)) if stamp else "-"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else (f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f}s")


def _number(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def serve(settings: ConsoleSettings, host: str, port: int) -> None:
    """One worker under gunicorn: if it dies it is replaced (the master keeps the port)."""
    from veri.infra.gunicorn import serve_under_gunicorn

    serve_under_gunicorn(lambda: create_app(settings), name="console", host=host, port=port, workers=1,
                         keep_alive_s=KEEP_ALIVE_S)
