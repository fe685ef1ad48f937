"""`veri serve policy` — the embedded CPU (`hf`) policy server."""

from __future__ import annotations

import argparse
from pathlib import Path


def register_serve(services: argparse._SubParsersAction) -> None:
    policy = services.add_parser("policy", help="serve a policy model token-in/token-out (hf backend)")
    policy.add_argument("--model", type=Path, required=True, help="transformers model folder")
    policy.add_argument("--host", default="127.0.0.1")
    policy.add_argument("--port", type=int, default=8001)
    policy.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    from veri.policy.hf.server import serve

    serve(model_dir=args.model, host=args.host, port=args.port)
    return 0
