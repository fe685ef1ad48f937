"""`veri serve launcher` — the sandbox launcher service."""

from __future__ import annotations

import argparse
import os
import sys

from veri.core import envs

# The token comes from VERI_CONTROL_TOKEN, never from a command line others can read.
NOT_FLAGS = ("token",)
FLAG_NAMES = {"max_parallel_rollouts": "--max-parallel", "host_paths": "--host-path", "host_aliases": "--host-alias"}
METAVARS = {"host_paths": "HERE=HOST", "host_aliases": "NAME=IP"}
KUBERNETES_FIELDS = ("namespace", "runtime_class", "registry", "output_claim", "kubeconfig", "proxy_port",
                     "create_per_second", "create_burst", "sandbox_egress", "registry_insecure", "host_aliases")


def register_serve(services: argparse._SubParsersAction) -> None:
    launcher = services.add_parser(
        "launcher", help="the sandbox launcher (one gVisor container per rollout, Docker SDK)",
        description="Run groups of harness rollouts in sandboxes: POST /v1/groups (GroupLaunch JSON) answers "
                    "one LaunchResult per rollout when the group is done. The docker backend needs the docker socket.",
    )
    from veri.infra.settings_cli import add_settings_flags
    from veri.services.launcher.settings import LauncherSettings

    kubernetes = [name for name in LauncherSettings.model_fields if name in KUBERNETES_FIELDS]
    add_settings_flags(launcher, LauncherSettings, exclude=(*kubernetes, *NOT_FLAGS), rename=FLAG_NAMES,
                       metavars=METAVARS)
    add_settings_flags(launcher.add_argument_group("backend kubernetes"), LauncherSettings, names=kubernetes,
                       rename=FLAG_NAMES, metavars=METAVARS)
    launcher.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    launcher.add_argument("--port", type=int, default=8002, help="the port to listen on")
    launcher.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    from veri.core.auth import BindRefused, refuse_open_bind
    from veri.infra.logging import configure_service_logging
    from veri.infra.settings_cli import SettingsError, settings_from_flags
    from veri.services.launcher.settings import LauncherSettings

    given = {"token": token} if (token := os.environ.get(envs.VERI_CONTROL_TOKEN)) else {}
    try:
        settings = settings_from_flags(LauncherSettings, args, rename=FLAG_NAMES, **given)
        refuse_open_bind(service="veri serve launcher", host=args.host, token=settings.token)
    except SettingsError as refused:
        print(f"veri serve launcher: {refused}", file=sys.stderr)
        return 2
    except BindRefused as refused:
        print(refused, file=sys.stderr)
        return 2
    configure_service_logging("launcher")
    from veri.services.launcher.app import serve
    from veri.services.launcher.errors import LauncherError

    try:
        serve(settings, args.host, args.port)
    except LauncherError as exc:  # expected: one line with the fix, no traceback (services/launcher/errors.py)
        print(f"veri serve launcher: {exc}", file=sys.stderr)
        return 1
    return 0
