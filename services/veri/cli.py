"""The `veri` command line.

For developers: each service owns its subcommands in its own `cli.py`, kept import-light (heavy imports
such as torch happen inside the command functions). What a user reads is `DESCRIPTION` and each
command's help line, which also opens that command's own `--help` (`_describe`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator

from veri.loop.evals import cli as evals_cli
from veri.services.console import cli as console_cli
from veri.services.egress import cli as egress_cli
from veri.services.launcher import cli as launcher_cli
from veri.services.policy import cli as policy_cli
from veri.services.proxy import cli as proxy_cli
from veri.services.trainer import cli as trainer_cli
from veri.services.webfixture import cli as webfixture_cli
from veri.tools.appliance import cli as appliance_cli
from veri.tools.export import cli as export_cli
from veri.tools.harness import cli as harness_cli
from veri.tools.models import cli as models_cli
from veri.tools.replay import cli as replay_cli
from veri.tools.tasks import cli as tasks_cli

DESCRIPTION = (
    "Train an LLM policy with reinforcement learning (GRPO) through your own agent program: veri runs the "
    "harness in gVisor sandboxes, captures the exact tokens of every model call, scores each rollout and "
    "trains on it. Start with `veri run-harness` (one harness, no training), then `make train CONFIG=...`."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="veri", description=DESCRIPTION)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    harness_cli.register(commands)
    models_cli.register(commands)
    tasks_cli.register(commands)

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
    evals_cli.register(commands)
    export_cli.register(commands)
    appliance_cli.register(commands)
    webfixture_cli.register(commands)
    _describe(parser)
    return parser


def commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ("veri",), line: str | None = None
) -> Iterator[tuple[tuple[str, ...], str | None, argparse.ArgumentParser]]:
    """Every command under `parser`, depth first: (its words, the help line its parent lists, its parser)."""
    yield path, line, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            lines = {choice.dest: choice.help for choice in action._choices_actions}
            for name, child in action.choices.items():
                yield from commands(child, (*path, name), lines.get(name))


def _describe(parser: argparse.ArgumentParser) -> None:
    """Give every subcommand without a description its help line, so `veri X --help` opens with what X does
    (argparse shows a subcommand's `help` only in its parent's list)."""
    for _path, line, command in commands(parser):
        if line and not command.description:
            command.description = line


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except Exception as error:
        # An expected failure (a service refused or did not answer) is one line with its fix; the
        # traceback goes to a log file, not to the user's terminal.
        from veri.infra.http import HttpCallError

        if not isinstance(error, HttpCallError):
            raise
        print(f"veri: {error}\n  (traceback: {_traceback_file(error)})", file=sys.stderr)
        return 1


def _traceback_file(error: BaseException) -> str:
    import tempfile
    import traceback
    from pathlib import Path

    log = Path(tempfile.gettempdir()) / "veri-cli-errors.log"
    with log.open("a") as out:
        out.write(f"--- veri {' '.join(sys.argv[1:])}\n{''.join(traceback.format_exception(error))}")
    return str(log)


if __name__ == "__main__":
    sys.exit(main())
