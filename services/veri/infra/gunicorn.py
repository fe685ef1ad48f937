"""A service under gunicorn with uvicorn workers: the proxy (`--workers N`) and the console.

gunicorn's master holds the listening socket and forks the workers; a worker that dies (kill -9, an
out-of-memory kill, a loop stuck past `WORKER_TIMEOUT_S`) is replaced, and while it is, the other
workers and the socket's backlog keep taking connections. The master imports the service's modules
first (the proxy's transformers and tokenizers take seconds), so a replacement is a fork, not a fresh
import; each worker builds its own app (`load_app`) and runs its lifespan.

Prometheus multiprocess mode (`prometheus_multiprocess_dir`): a dead worker's live gauges are dropped
by gunicorn's `child_exit` hook in the master (a worker killed with -9 cannot do it itself).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

from gunicorn.app.base import BaseApplication  # type: ignore[import-untyped]  # gunicorn ships no types
from gunicorn.glogging import Logger  # type: ignore[import-untyped]
from uvicorn_worker import UvicornWorker  # type: ignore[import-untyped]

from veri.core import envs

# A worker whose event loop has not ticked for this long is killed and replaced (it notifies the
# master every half of it). Longer than any blocking step a healthy worker takes, startup included.
WORKER_TIMEOUT_S = 120
# On SIGTERM (docker stop), workers get this long to finish the calls they serve.
GRACEFUL_TIMEOUT_S = 10


class VeriUvicornWorker(UvicornWorker):
    # veri's AccessLog middleware logs each request with its route, status and duration.
    CONFIG_KWARGS = {**UvicornWorker.CONFIG_KWARGS, "access_log": False}


class RootHandlersLogger(Logger):
    """gunicorn's own lines (workers booted, exited, killed) through the root logger's handlers: the
    service's JSON stream (`core.logging`). The uvicorn worker hands the same handlers to uvicorn."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for log in (self.error_log, self.access_log):
            log.handlers = list(logging.getLogger().handlers)
            log.propagate = False


class _Application(BaseApplication):
    def __init__(self, load_app: Callable[[], Any], options: dict[str, Any]) -> None:
        self._load_app = load_app
        self._options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self._options.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        return self._load_app()  # in each worker, after the fork


def serve_under_gunicorn(load_app: Callable[[], Any], *, name: str, host: str, port: int, workers: int,
                         keep_alive_s: int, on_worker_exit: Callable[[int], None] | None = None) -> None:
    """Run until stopped. `on_worker_exit(pid)` runs in the master after any worker exits, however."""

    def child_exit(_: Any, worker: Any) -> None:
        multiprocess_dir = os.environ.get(envs.PROMETHEUS_MULTIPROC_DIR)
        if multiprocess_dir:
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(worker.pid, path=multiprocess_dir)
        if on_worker_exit is not None:
            on_worker_exit(worker.pid)

    options = {
        "bind": [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"],
        "workers": workers,
        "worker_class": VeriUvicornWorker,
        "keepalive": keep_alive_s,
        "timeout": WORKER_TIMEOUT_S,
        "graceful_timeout": GRACEFUL_TIMEOUT_S,
        "logger_class": RootHandlersLogger,
        "loglevel": "info",
        "proc_name": f"veri-{name}",
        "child_exit": child_exit,
        # gunicorn's control socket (one path per user by default) would be shared by every server here.
        "control_socket_disable": True,
    }
    _Application(load_app, options).run()


@contextlib.contextmanager
def prometheus_multiprocess_dir(prefix: str) -> Iterator[str]:
    """A fresh PROMETHEUS_MULTIPROC_DIR for this start (set before prometheus-client is imported).

    Removed when the master leaves, never by a worker: gunicorn's forked workers unwind through this
    same frame when they exit."""
    owner = os.getpid()
    folder = tempfile.mkdtemp(prefix=prefix)
    os.environ[envs.PROMETHEUS_MULTIPROC_DIR] = folder
    try:
        yield folder
    finally:
        if os.getpid() == owner:
            shutil.rmtree(folder, ignore_errors=True)
