"""`veri serve policy` — the embedded CPU (`hf`) policy server."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from veri.core import envs


def register_serve(services: argparse._SubParsersAction) -> None:
    policy = services.add_parser("policy", help="serve a policy model token-in/token-out (hf backend)")
    policy.add_argument("--model", type=Path, required=True, help="transformers model folder")
    policy.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    policy.add_argument("--port", type=int, default=8001, help="the port to listen on")
    policy.add_argument("--served-model-name", help="model id in the API (default: --model as given)")
    policy.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                        help="the weights' and activations' type (float32: what the CPU trainer computes logprobs in)")
    policy.add_argument("--threads", type=int, default=None, help="torch threads (default: cores - 1, at most 8)")
    policy.add_argument("--max-batch-rows", type=int, default=64, help="completions decoded together at most")
    policy.add_argument("--max-logprobs", type=int, default=20, help="largest `logprobs` one request may ask")
    policy.add_argument(
        "--scripted-replies", type=Path, default=os.environ.get("VERI_POLICY_SCRIPTED_REPLIES") or None,
        help="test-only: JSON rules that teacher-force replies (env VERI_POLICY_SCRIPTED_REPLIES)"
    )
    policy.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    from veri.core.auth import BindRefused, refuse_open_bind

    try:
        refuse_open_bind(service="veri serve policy", host=args.host, token=os.environ.get(envs.VERI_CONTROL_TOKEN))
    except BindRefused as refused:
        print(refused, file=sys.stderr)
        return 2
    from veri.services.policy.hf.server import serve

    options = {
        "served_model_name": args.served_model_name,
        "dtype": args.dtype,
        "max_batch_rows": args.max_batch_rows,
        "max_logprobs": args.max_logprobs,
        "scripted_replies": args.scripted_replies,
        "token": os.environ.get(envs.VERI_CONTROL_TOKEN) or None,
    }
    if args.threads is not None:
        options["threads"] = args.threads
    serve(model_dir=args.model, host=args.host, port=args.port, **options)
    return 0
