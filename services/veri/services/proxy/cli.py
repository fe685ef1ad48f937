"""`veri serve proxy` and `veri session ...` — the capture proxy and its control commands."""

from __future__ import annotations

import argparse
import json
import os
import sys

from veri.core import envs

# ProxySettings fields that are not flags: the policy URLs have their own (repeatable, comma-separated)
# flag; the control token comes from VERI_CONTROL_TOKEN, never from a command line others can read.
NOT_FLAGS = ("policy_url", "policy_urls", "control_token")
FLAG_NAMES = {"model_dir": "--model", "store_dir": "--store"}


def register_serve(services: argparse._SubParsersAction) -> None:
    proxy = services.add_parser("proxy", help="the capture proxy (OpenAI + Anthropic routes per rollout)")
    from veri.infra.settings_cli import add_settings_flags
    from veri.services.proxy.settings import ProxySettings

    proxy.add_argument("--policy-url", action="append", metavar="URL", dest="policy_url_flags",
                       help="base URL of the policy server (vLLM or hf); repeat it, or separate URLs with commas,"
                            " for several replicas (each rollout's calls stay on one); else"
                            f" ${envs.VERI_PROXY_PREFIX}POLICY_URL or ${envs.VERI_PROXY_PREFIX}POLICY_URLS"
                            " (a JSON list)")
    add_settings_flags(proxy, ProxySettings, exclude=NOT_FLAGS, rename=FLAG_NAMES)
    proxy.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    proxy.add_argument("--port", type=int, default=8000, help="port to bind (default 8000)")
    proxy.add_argument("--workers", type=int, default=1,
                       help="worker processes under gunicorn (a worker that dies is replaced; default 1)")
    proxy.set_defaults(func=_serve)


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
            action.add_argument("rollout_id", help="the session's rollout id (what `veri session open` printed)")
        else:
            action.add_argument("--record-requests", action="store_true",
                                help="keep this session's requests as sent, for `veri replay record`")
        action.set_defaults(func=_session)


def settings_from_args(args: argparse.Namespace):
    """ProxySettings from the flags given, then VERI_PROXY_<FIELD>, then the defaults (infra/settings_cli.py);
    a SettingsError names the flag and the variable of a value refused."""
    from veri.infra.settings_cli import settings_from_flags
    from veri.services.proxy.settings import ProxySettings

    given: dict = policy_urls(args.policy_url_flags) if args.policy_url_flags else {}
    if token := os.environ.get(envs.VERI_CONTROL_TOKEN):
        given["control_token"] = token
    return settings_from_flags(ProxySettings, args, rename=FLAG_NAMES, **given)


def policy_urls(values: list[str]) -> dict:
    """`--policy-url` as given (repeated and/or comma-separated) -> policy_url or policy_urls."""
    urls = [url.strip() for value in values for url in value.split(",") if url.strip()]
    # Both keys: the flag replaces whichever of the two variables is set.
    return {"policy_url": urls[0], "policy_urls": []} if len(urls) == 1 else {"policy_url": None, "policy_urls": urls}


def _serve(args: argparse.Namespace) -> int:
    from veri.core.auth import BindRefused, refuse_open_bind
    from veri.infra.gunicorn import prometheus_multiprocess_dir
    from veri.infra.logging import configure_service_logging
    from veri.infra.settings_cli import SettingsError

    if args.workers < 1:
        print(f"veri serve proxy: --workers {args.workers}: give 1 or more", file=sys.stderr)
        return 2
    try:
        settings = settings_from_args(args)
        refuse_open_bind(service="veri serve proxy", host=args.host, token=settings.control_token)
    except (SettingsError, BindRefused) as refused:
        print(f"veri serve proxy: {refused}" if isinstance(refused, SettingsError) else refused, file=sys.stderr)
        return 2
    configure_service_logging("proxy", libraries=("transformers",))
    # A fresh multiprocess folder per start, set before prometheus-client is imported: workers come and
    # go (gunicorn replaces a dead one), the counts stay; an inherited folder would mix in another run's.
    with prometheus_multiprocess_dir("veri-proxy-metrics-"):
        from veri.services.proxy.app import serve

        serve(settings, host=args.host, port=args.port, workers=args.workers)
    return 0


def _session(args: argparse.Namespace) -> int:
    from veri.services.proxy.control_client import ControlClient, ControlError

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
