"""`veri serve launcher` — the sandbox launcher service."""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from pathlib import Path

from veri.core import envs


def register_serve(services: argparse._SubParsersAction) -> None:
    launcher = services.add_parser(
        "launcher", help="the sandbox launcher (one gVisor container per rollout, Docker SDK)",
        description="Run groups of harness rollouts in sandboxes: POST /v1/groups (GroupLaunch JSON) answers "
                    "one LaunchResult per rollout when the group is done. The docker backend needs the docker socket.",
    )
    launcher.add_argument("--backend", choices=("docker", "kubernetes", "local"), default="docker",
                          help="docker: gVisor sandboxes (default); kubernetes: one Job per rollout (gVisor "
                               "RuntimeClass); local: plain processes, dev only, no isolation")
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
    k8s = launcher.add_argument_group("backend kubernetes")
    k8s.add_argument("--namespace", default="veri-rollouts", help="namespace of the rollout Jobs")
    k8s.add_argument("--runtime-class", default="gvisor", help="RuntimeClass of rollout pods (runsc on the nodes)")
    k8s.add_argument("--registry", default=None, help="registry the nodes pull harness images from "
                                                       "(veri harness push --registry R): images become R/<image>")
    k8s.add_argument("--output-claim", default=None, help="PVC mounted at --output-root here and by each rollout "
                                                           "pod (subPath); without it a hostPath of the same path")
    k8s.add_argument("--kubeconfig", type=Path, default=None, help="else in-cluster, $KUBECONFIG, ~/.kube/config")
    k8s.add_argument("--proxy-port", type=int, default=8000, help="the proxy's rollout port (NetworkPolicy)")
    k8s.add_argument("--create-per-second", type=float, default=20.0, help="rollouts created per second")
    k8s.add_argument("--create-burst", type=int, default=20, help="rollouts created at once before the rate")
    k8s.add_argument("--registry-insecure", action="store_true", help="the registry speaks http (its labels are read)")
    k8s.add_argument("--sandbox-egress", choices=("web", "none"), default="web",
                     help="without --registry (no image labels to read): every rollout pod reaches the proxy and "
                          "the public web (web), or only the proxy (none)")
    k8s.add_argument("--host-alias", action="append", default=[], metavar="NAME=IP",
                     help="pin NAME to IP in every rollout pod's /etc/hosts (hostAliases; the NetworkPolicies allow "
                          "IP): a proxy and web fixture outside the cluster, e.g. proxy=10.0.0.5 (compose's "
                          "VERI_K8S_STACK_ADDRESS). The output root's node path comes from --host-path")
    launcher.add_argument("--host", default="127.0.0.1")
    launcher.add_argument("--port", type=int, default=8002)
    launcher.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    from veri.core.auth import BindRefused, refuse_open_bind
    from veri.core.logging import configure_service_logging

    try:
        refuse_open_bind(service="veri serve launcher", host=args.host, token=os.environ.get(envs.VERI_CONTROL_TOKEN))
    except BindRefused as refused:
        print(refused, file=sys.stderr)
        return 2
    configure_service_logging("launcher")
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
    host_aliases = {}
    for item in args.host_alias:
        name, sep, ip = item.partition("=")
        try:
            ipaddress.ip_address(ip)
        except ValueError:
            sep = ""
        if not sep or not name:
            print(f"veri serve launcher: --host-alias {item!r} is not NAME=IP (an IP address, e.g. "
                  "proxy=10.0.0.5)", file=sys.stderr)
            return 2
        host_aliases[name] = ip
    settings = LauncherSettings(
        backend=args.backend, network=args.network, output_root=args.output_root, launcher_id=args.launcher_id,
        max_parallel_rollouts=args.max_parallel, unsafe_runc=args.unsafe_runc,
        token=os.environ.get(envs.VERI_CONTROL_TOKEN) or None, host_paths=host_paths,
        namespace=args.namespace, runtime_class=args.runtime_class, registry=args.registry,
        output_claim=args.output_claim, kubeconfig=args.kubeconfig, proxy_port=args.proxy_port,
        create_per_second=args.create_per_second, create_burst=args.create_burst,
        sandbox_egress=args.sandbox_egress, registry_insecure=args.registry_insecure, host_aliases=host_aliases,
    )
    try:
        serve(settings, args.host, args.port)
    except LauncherError as exc:  # expected: one line with the fix, no traceback (launcher/errors.py)
        print(f"veri serve launcher: {exc}", file=sys.stderr)
        return 1
    return 0
