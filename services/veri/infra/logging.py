"""Service logs: one JSON line per event, from every `veri serve ...` service and the trainer's log file.

`configure_service_logging(service)` is the one place the format is set. structlog events and the
standard-library records of uvicorn, gunicorn, httpx, transformers and Python warnings pass through
the same processors (structlog's `ProcessorFormatter`) into one stream on stderr, each line with
`timestamp` (UTC, ISO 8601), `level`, `service`, `event`, `logger`, `pid` and the event's fields.
`AccessLog` writes one `request` event per HTTP request (method, path, route, status, duration_ms,
rollout_id). `VERI_LOG_FORMAT=console` renders the same events for a person (development).

What a person reads from `make` and the `veri` commands stays human: only service logs are JSON.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, MutableMapping
from typing import Any

import orjson
import structlog

from veri.core import envs

FORMATS = ("json", "console")
# Libraries that log every HTTP call they make at INFO (the access log already has each request):
# kept at WARNING, so their problems still reach the stream.
CHATTY_LIBRARIES = ("httpx", "httpcore", "docker", "urllib3")
# Polled by health checks and scrapers every few seconds: logged only when they fail.
QUIET_PATHS = frozenset({"/health", "/metrics"})

Processor = Callable[[Any, str, MutableMapping[str, Any]], Any]

_STAMP = structlog.processors.TimeStamper(fmt="iso", utc=True, key="timestamp")
FIRST_KEYS = ("timestamp", "level", "service", "event")  # where a reader's eye starts, in every line


def log_format() -> str:
    """`json` unless VERI_LOG_FORMAT says `console`; anything else stops the process, naming the choices."""
    value = (os.environ.get(envs.VERI_LOG_FORMAT) or "json").strip().lower()
    if value not in FORMATS:
        raise SystemExit(f"{envs.VERI_LOG_FORMAT}={value!r}: set it to json (the default) or console")
    return value


def _add_service(service: str) -> Processor:
    def add_service(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        event.setdefault("service", service)
        event.setdefault("pid", os.getpid())  # a worker's lines tell which worker
        return event

    return add_service


def shared_processors(service: str) -> list[Processor]:
    """What every event gets, from structlog or from a library's logging record alike."""
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        _STAMP,
        _add_service(service),
    ]


def _drop_uvicorn_colors(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    event.pop("color_message", None)  # uvicorn's own copy of the message, with terminal colour codes
    return event


def _first_keys_first(_: Any, __: str, event: MutableMapping[str, Any]) -> dict[str, Any]:
    return {**{key: event[key] for key in FIRST_KEYS if key in event}, **event}


def _json_dumps(value: Any, **_: Any) -> str:
    return orjson.dumps(value, default=str).decode()


def _renderer(fmt: str) -> Processor:
    if fmt == "console":
        return structlog.dev.ConsoleRenderer(colors=False)
    return structlog.processors.JSONRenderer(serializer=_json_dumps)


def service_formatter(service: str, fmt: str | None = None) -> logging.Formatter:
    """A logging formatter that renders any record (a library's, or a structlog event) as one line."""
    fmt = fmt or log_format()
    finish: list[Processor] = [structlog.stdlib.ProcessorFormatter.remove_processors_meta]
    if fmt == "json":  # a traceback inside the JSON line, not lines of its own
        finish += [structlog.processors.format_exc_info, _first_keys_first]
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared_processors(service), structlog.stdlib.ExtraAdder(), _drop_uvicorn_colors],
        processors=[*finish, _renderer(fmt)],
    )


def configure_service_logging(service: str, *, level: int = logging.INFO, libraries: tuple[str, ...] = ()) -> None:
    """Send this process's structlog events and library records to stderr, one line each.

    `libraries`: those that keep a handler of their own (`transformers`), moved onto the stream too.
    A forked worker (gunicorn) inherits all of it.
    """
    fmt = log_format()
    structlog.configure(
        processors=[structlog.stdlib.filter_by_level, *shared_processors(service),
                    structlog.processors.StackInfoRenderer(),
                    structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(service_formatter(service, fmt))
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level)
    # uvicorn and gunicorn install handlers of their own; theirs go to the root's instead.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "gunicorn", "gunicorn.error", "gunicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers = []
        logger.propagate = True
    for name in CHATTY_LIBRARIES:
        logging.getLogger(name).setLevel(max(level, logging.WARNING))
    logging.captureWarnings(True)
    if "transformers" in libraries:
        import transformers.utils.logging as hf_logging

        hf_logging.disable_default_handler()
        hf_logging.enable_propagation()
        hf_logging.disable_progress_bar()  # a bar ("Loading weights") is terminal output, not an event


def event_line(service: str, event: str, *, level: str = "info", **fields: Any) -> str:
    """One event as the JSON line a service would log: for logs written to a file (the trainer's)."""
    stamped = _STAMP(None, level, {})
    return _json_dumps({"timestamp": stamped["timestamp"], "level": level, "service": service, "event": event,
                        "pid": os.getpid(), **fields})


class AccessLog:
    """Pure ASGI middleware: one `request` event per HTTP request, when its reply's last byte is sent
    (a streamed reply stays streamed). Health checks and scrapes are logged only when they fail."""

    def __init__(self, app: Any, logger_name: str = "veri.access") -> None:
        self.app = app
        # A standard-library logger: in a service its records join the JSON stream (their fields through
        # ExtraAdder); in a process that set up no logging (a test, `veri replay run`) they go nowhere.
        self.log = logging.getLogger(logger_name)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = {"code": 500}  # what a handler that raised past every error handler answers

        async def send_status(message: Any) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            code = status["code"]
            if scope["path"] not in QUIET_PATHS or code >= 400:
                self._log(scope, code, (time.perf_counter() - started) * 1000)

    def _log(self, scope: Any, status: int, duration_ms: float) -> None:
        route = scope.get("route")  # set by the router on the request's scope when a route matched
        fields: dict[str, Any] = {"method": scope["method"], "path": scope["path"],
                                  "route": getattr(route, "path", None), "status": status,
                                  "duration_ms": round(duration_ms, 2)}
        rollout_id = (scope.get("path_params") or {}).get("rollout_id")
        if rollout_id is not None:
            fields["rollout_id"] = rollout_id
        client = scope.get("client")
        if client:
            fields["client"] = client[0]
        self.log.log(logging.WARNING if status >= 500 else logging.INFO, "request", extra=fields)
