"""`veri serve console --state DIR`: the console on 127.0.0.1:8300 (read-only over <state>/jobs)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from veri.core import envs
from veri.core.state import STATE_IN_CHECKOUT
from veri.core.state import state_dir as default_state_dir
from veri.services.console.settings import DEFAULT_HOST, DEFAULT_PORT


def register_serve(services: argparse._SubParsersAction) -> None:
    console = services.add_parser("console", help="the web console: jobs, live logs, plots, the trajectory archive")
    console.add_argument("--state", type=Path, default=None,
                         help=f"the stack's state folder; jobs are <state>/jobs/<name>"
                              f" (default ${envs.VERI_STATE_DIR}, else the checkout's {STATE_IN_CHECKOUT})")
    console.add_argument("--host", default=DEFAULT_HOST,
                         help="the address to listen on (another than loopback needs $VERI_CONSOLE_TOKEN)")
    console.add_argument("--port", type=int, default=DEFAULT_PORT, help="the port to listen on")
    console.add_argument("--allowed-host", action="append", metavar="NAME",
                         default=[name for name in os.environ.get(envs.VERI_CONSOLE_HOSTS, "").split(",") if name],
                         help="a Host name to answer besides 127.0.0.1/localhost (a page under any other name is "
                              "refused: DNS rebinding); repeatable "
                              f"(default ${envs.VERI_CONSOLE_HOSTS}, comma-separated)")
    console.set_defaults(func=_serve)


def state_dir(given: Path | None) -> Path:
    return given or default_state_dir()


def _serve(args: argparse.Namespace) -> int:
    import structlog

    from veri.core.auth import BindRefused, refuse_open_bind
    from veri.infra.logging import configure_service_logging

    token = os.environ.get(envs.VERI_CONSOLE_TOKEN) or None
    try:
        refuse_open_bind(service="veri serve console", host=args.host, token=token,
                         allow_env=envs.VERI_CONSOLE_LOOPBACK_PUBLISHED, token_env=envs.VERI_CONSOLE_TOKEN)
    except BindRefused as refused:
        print(refused)
        return 2
    state = state_dir(args.state)
    if not state.is_dir():
        print(f"veri serve console: no state folder {state} (give --state, the folder holding jobs/)")
        return 2
    # One worker, under gunicorn so that it is replaced if it dies; its /metrics are its own (no
    # multiprocess folder: an inherited one would mix in another run's counts).
    os.environ.pop(envs.PROMETHEUS_MULTIPROC_DIR, None)
    configure_service_logging("console")
    from veri.services.console.app import serve
    from veri.services.console.settings import ConsoleSettings

    structlog.get_logger("veri.console").info("console starting", url=f"http://{args.host}:{args.port}",
                                              jobs=str(state.resolve() / "jobs"))
    serve(ConsoleSettings(state_dir=state.resolve(), allowed_hosts=tuple(args.allowed_host), token=token),
          args.host, args.port)
    return 0
