"""`veri serve proxy` and `veri session ...` — the capture proxy and its control commands."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from veri.core import envs


def register_serve(services: argparse._SubParsersAction) -> None:
    proxy = services.add_parser("proxy", help="the capture proxy (OpenAI + Anthropic routes per rollout)")
    proxy.add_argument("--policy-url", required=True, action="append", metavar="URL",
                       help="base URL of the policy server (vLLM or hf); repeat it, or separate URLs with commas,"
                            " for several replicas (each rollout's calls stay on one)")
    proxy.add_argument("--data-parallel-size", type=int, default=1, metavar="D",
                       help="the policy's `vllm serve --data-parallel-size`: pin each rollout to one rank"
                            " (X-data-parallel-rank)")
    proxy.add_argument("--model", type=Path, required=True, help="model folder (tokenizer + chat template)")
    proxy.add_argument("--served-model-name", default=None, help="model name the policy serves (default: its only one)")
    proxy.add_argument("--renderer", default="auto", help="renderers name (qwen3, default, ...) or auto")
    proxy.add_argument("--host", default="127.0.0.1")
    proxy.add_argument("--port", type=int, default=8000)
    proxy.add_argument("--store", type=Path, default=Path("build/spans"), help="span store folder")
    proxy.add_argument("--public-url", default=None, help="base URL harnesses use to reach this proxy")
    proxy.add_argument("--temperature", type=float, default=1.0)
    proxy.add_argument("--top-p", type=float, default=1.0)
    proxy.add_argument("--max-tokens", type=int, default=1024, help="cap on tokens per model call")
    proxy.add_argument("--hosted-tools", choices=["drop", "refuse"], default="drop",
                       help="a request's hosted tools (web_search, ...; the policy cannot run them): drop them from"
                            " the prompt, named on the span (default), or refuse the request with 400")
    proxy.add_argument("--chat-template-kwargs", type=_json_object, metavar="JSON",
                       default=os.environ.get(envs.VERI_CHAT_TEMPLATE_KWARGS, ""),
                       help="extra chat template variables, a JSON object, e.g. '{\"enable_thinking\": false}' "
                            f"(default ${envs.VERI_CHAT_TEMPLATE_KWARGS} or none)")
    proxy.add_argument("--workers", type=int, default=1,
                       help="worker processes under gunicorn (a worker that dies is replaced)")
    proxy.add_argument("--max-body-bytes", type=int, default=32 * 1024 * 1024)
    proxy.add_argument("--record-requests", action="store_true",
                       help="keep every session's requests as sent, for `veri replay record` (default: only"
                            " sessions opened with record_requests)")
    proxy.set_defaults(func=_serve)


def _json_object(text: str) -> dict:
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError as error:
        hint = "pass an object like '{\"enable_thinking\": false}'"
        raise argparse.ArgumentTypeError(f"not JSON ({error}): {hint}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object, like '{\"enable_thinking\": false}'")
    return value


def register_session(commands: argparse._SubParsersAction) -> None:
    session = commands.add_parser("session", help="open / inspect / close a rollout session on a proxy")
    actions = session.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, help_text in (("open", "open a session; prints its keys and URLs as JSON"),
                            ("spans", "print a session's spans as JSON"),
                            ("close", "close a session (further calls get 409)")):
        action = actions.add_parser(name, help=help_text)
        action.add_argument("--proxy", required=True, help="proxy base URL, e.g. http://127.0.0.1:8000")
        action.add_argument("--token", default=os.environ.get(envs.VERI_CONTROL_TOKEN), help="control token")
        if name != "open":
            action.add_argument("rollout_id")
        else:
            action.add_argument("--record-requests", action="store_true",
                                help="keep this session's requests as sent, for `veri replay record`")
        action.set_defaults(func=_session)


def _serve(args: argparse.Namespace) -> int:
    from veri.core.gunicorn_server import prometheus_multiprocess_dir
    from veri.core.logging import configure_service_logging

    if args.workers < 1:
        print(f"veri serve proxy: --workers {args.workers}: give 1 or more", file=sys.stderr)
        return 2
    from veri.core.auth import BindRefused, refuse_open_bind

    try:
        refuse_open_bind(service="veri serve proxy", host=args.host, token=os.environ.get(envs.VERI_CONTROL_TOKEN))
    except BindRefused as refused:
        print(refused, file=sys.stderr)
        return 2
    configure_service_logging("proxy", libraries=("transformers",))
    # A fresh multiprocess folder per start, set before prometheus-client is imported: workers come and
    # go (gunicorn replaces a dead one), the counts stay; an inherited folder would mix in another run's.
    with prometheus_multiprocess_dir("veri-proxy-metrics-"):
        from veri.proxy.app import serve

        serve(args)
    return 0


def _session(args: argparse.Namespace) -> int:
    from veri.proxy.control_client import ControlClient, ControlError

    client = ControlClient(args.proxy, token=args.token)
    try:
        if args.action == "open":
            result = client.open_session(record_requests=args.record_requests).model_dump(mode="json")
        elif args.action == "spans":
            result = [span.model_dump(mode="json") for span in client.spans(args.rollout_id)]
        else:
            result = client.close_session(args.rollout_id).model_dump(mode="json")
    except ControlError as error:
        print(f"veri session {args.action}: {error}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2))
    return 0
