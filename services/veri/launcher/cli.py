"""`veri serve launcher` — the sandbox launcher service."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from veri.core import envs


def register_serve(services: argparse._SubParsersAction) -> None:
    launcher = services.add_parser(
        "launcher", help="the sandbox launcher (one gVisor container per rollout, Docker SDK)",
        description="Run groups of harness rollouts in sandboxes: POST /v1/groups (GroupLaunch JSON) answers "
                    "one LaunchResult per rollout when the group is done. Needs the docker socket.",
    )
    launcher.add_argument("--backend", choices=("docker", "local"), default="docker",
                          help="docker: gVisor sandboxes (default); local: plain processes, dev only, no isolation")
    launcher.add_argument("--network", default="veri-rollouts", help="docker network of the sandboxes (rollouts only)")
    launcher.add_argument("--output-root", type=Path, default=Path("build/rollouts"),
                          help="where each rollout's VERI_OUTPUT_DIR is collected (the trainer reads the same path)")
    launcher.add_argument("--launcher-id", default="default",
                          help="label of this launcher's sandboxes (leftovers with it are removed at start)")
    launcher.add_argument("--max-parallel", type=int, default=64, help="sandboxes alive at once, over all groups")
    launcher.add_argument("--unsafe-runc", action="store_true",
                          help="run sandboxes with runc instead of gVisor: NO isolation from the host kernel")
    launcher.add_argument("--host-path", action="append", default=[], metavar="HERE=HOST",
                          help="a folder as this process sees it = the host's path (bind mounts name host paths; "
                               "read from this container's mounts when omitted)")
    launcher.add_argument("--host", default="127.0.0.1")
    launcher.add_argument("--port", type=int, default=8002)
    launcher.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    from veri.launcher.app import serve
    from veri.launcher.errors import LauncherError
    from veri.launcher.settings import LauncherSettings

    host_paths = {}
    for item in args.host_path:
        here, sep, host = item.partition("=")
        if not sep:
            print(f"veri serve launcher: --host-path {item!r} is not HERE=HOST", file=sys.stderr)
            return 2
        host_paths[here] = host
    settings = LauncherSettings(
        backend=args.backend, network=args.network, output_root=args.output_root, launcher_id=args.launcher_id,
        max_parallel_rollouts=args.max_parallel, unsafe_runc=args.unsafe_runc,
        token=os.environ.get(envs.VERI_CONTROL_TOKEN) or None, host_paths=host_paths,
    )
    try:
        serve(settings, args.host, args.port)
    except LauncherError as exc:  # expected: one line with the fix, no traceback (launcher/errors.py)
        print(f"veri serve launcher: {exc}", file=sys.stderr)
        return 1
    return 0
