"""`veri` command line. Each service owns its subcommands in its own `cli.py` (kept import-light:
heavy imports such as torch happen inside the command functions)."""

from __future__ import annotations

import argparse
import sys

from veri.appliance import cli as appliance_cli
from veri.console import cli as console_cli
from veri.egress import cli as egress_cli
from veri.harness import cli as harness_cli
from veri.launcher import cli as launcher_cli
from veri.models import cli as models_cli
from veri.policy import cli as policy_cli
from veri.proxy import cli as proxy_cli
from veri.replay import cli as replay_cli
from veri.trainer import cli as trainer_cli
from veri.webfixture import cli as webfixture_cli


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="veri", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    harness_cli.register(commands)
    models_cli.register(commands)

    serve = commands.add_parser("serve", help="run one veri service in the foreground")
    services = serve.add_subparsers(dest="service", required=True, metavar="SERVICE")
    console_cli.register_serve(services)
    egress_cli.register_serve(services)
    launcher_cli.register_serve(services)
    policy_cli.register_serve(services)
    proxy_cli.register_serve(services)
    webfixture_cli.register_serve(services)

    proxy_cli.register_session(commands)
    replay_cli.register(commands)
    trainer_cli.register(commands)
    appliance_cli.register(commands)
    webfixture_cli.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
