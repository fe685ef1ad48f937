"""`veri serve egress`: the egress gateway (the launcher starts it; see gateway.py)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from veri.core import envs


def register_serve(services: argparse._SubParsersAction) -> None:
    gateway = services.add_parser("egress", help="the sandboxes' egress gateway (a forward proxy; the launcher "
                                                 "starts it)")
    gateway.add_argument("--host", default="0.0.0.0", help="the address to listen on")
    gateway.add_argument("--port", type=int, default=3128, help="the port to listen on (HTTP proxy)")
    gateway.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    key = os.environ.get(envs.VERI_EGRESS_KEY, "")
    if len(key) < 32:
        print(f"veri serve egress: set {envs.VERI_EGRESS_KEY} (64 hex characters: the launcher that starts this "
              "gateway makes one and signs each sandbox's pass with it)", file=sys.stderr)
        return 2
    from veri.infra.logging import configure_service_logging
    from veri.services.egress.gateway import run

    configure_service_logging("egress")
    try:
        asyncio.run(run(args.host, args.port, bytes.fromhex(key)))
    except KeyboardInterrupt:
        return 0
    return 0
