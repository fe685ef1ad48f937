"""The command-line options every command that runs rollouts through the stack takes (`veri train`,
`veri eval`): where the proxy, the policy and the launcher are, and how sandboxes start. One place, so
the two commands cannot drift."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from veri.core import envs

DEFAULT_PROXY_URL = "http://127.0.0.1:8000"
DEFAULT_POLICY_URL = "http://127.0.0.1:8001"
DEFAULT_LAUNCHER_URL = "http://127.0.0.1:8002"


def add_stack_arguments(parser: argparse.ArgumentParser, *, policy_note: str) -> None:
    """`policy_note`: what the command does with the policy server(s), for --policy-url's help."""
    parser.add_argument("--proxy-url", default=os.environ.get(envs.VERI_PROXY_URL, DEFAULT_PROXY_URL),
                        help=f"the capture proxy (default ${envs.VERI_PROXY_URL} or {DEFAULT_PROXY_URL})")
    parser.add_argument("--policy-url", default=os.environ.get(envs.VERI_POLICY_URL, DEFAULT_POLICY_URL),
                        help=f"the policy server(s), comma-separated: {policy_note}"
                             f" (default ${envs.VERI_POLICY_URL} or {DEFAULT_POLICY_URL})")
    parser.add_argument("--control-token", default=os.environ.get(envs.VERI_CONTROL_TOKEN),
                        help=f"the proxy's control token (default ${envs.VERI_CONTROL_TOKEN})")
    parser.add_argument("--sandbox", choices=["docker", "launcher", "local"], default="docker",
                        help="docker: gVisor sandboxes from this process; launcher: through the launcher service;"
                             " local: plain subprocesses, for development only")
    parser.add_argument("--image", default=None, help="docker, launcher: the harness bundle's image")
    parser.add_argument("--launcher-url", default=os.environ.get(envs.VERI_LAUNCHER_URL, DEFAULT_LAUNCHER_URL),
                        help=f"the launcher service (default ${envs.VERI_LAUNCHER_URL} or {DEFAULT_LAUNCHER_URL})")
    parser.add_argument("--base-dir", type=Path, default=None,
                        help="where the config's relative paths start (default: the current directory)")
    parser.add_argument("--harbor-tasks", dest="staged_tasks", type=Path, default=None, metavar="FILE",
                        help="a Harbor dataset's tasks as `veri tasks stage` made them ready on the host (make train"
                             " passes it to the trainer container, which has no Docker to build them with)")


# Left out of a command line printed back: the control token (a secret), and --sandbox and --image, which
# refuse_without_image writes itself.
_NOT_ECHOED = {"help", "control_token", "sandbox", "image"}


def command_options(parser: argparse.ArgumentParser) -> tuple[argparse.Action, ...]:
    """Every option of a command (not its positionals), for `given_options`: call it once all are added."""
    return tuple(action for action in parser._actions if action.option_strings and action.dest != "help")


def given_options(args: argparse.Namespace, options: tuple[argparse.Action, ...]) -> list[str]:
    """`options` as given (those at their defaults left out), as a command line in the parser's order."""
    words: list[str] = []
    for action in options:
        value = getattr(args, action.dest)
        if value == action.default or action.dest in _NOT_ECHOED:
            continue
        flag = max(action.option_strings, key=len)
        if action.nargs == 0:
            words.append(flag)
        elif isinstance(value, (list, tuple)):
            words += [flag, *map(str, value)]
        else:
            words += [flag, str(value)]
    return words


def harbor_tasks_of(args: argparse.Namespace, config: object) -> dict[str, dict[str, object]]:
    """LaunchSettings.harbor_tasks for the command: the staged file (--harbor-tasks), else resolved here by the
    callable veri/cli.py set as the command's `harbor_tasks` default (tools/tasks/job.py), else none."""
    from veri.loop.collect.harbor import load_staged

    if args.staged_tasks is not None:
        return load_staged(args.staged_tasks)
    resolve = getattr(args, "harbor_tasks", None)
    return resolve(config, args.sandbox, args.image) if resolve is not None else {}


def refuse_without_image(args: argparse.Namespace, *, command: str, make: str, through_make: str) -> None:
    """Sandboxes (docker, launcher) run the harness bundle's image: without --image, a StackError that prints the
    exact commands that run `veri COMMAND` as given, before anything starts. `args.command_options`: the command's
    options (`command_options`). `make`: the make command that does it through the stack, `through_make`: what
    that does.

    Not found or built here: a run through the stack must run where the stack's paths hold (the policy container
    loads weights from /state/jobs, the trainer container's --output, not this host's) with the proxy sampling
    at the job's settings, which `make train` and `make eval` set up."""
    import shlex

    from veri.core.config import parse_config, read_config_file
    from veri.loop.collect.errors import StackError

    if args.sandbox == "local" or args.image:
        return
    bundle = parse_config(read_config_file(args.config), base_dir=args.base_dir).harness_bundle
    try:
        bundle = bundle.relative_to(Path.cwd())
    except ValueError:
        pass  # outside the current folder: its absolute path
    by_hand = shlex.join(["veri", command, str(args.config), *given_options(args, args.command_options),
                          "--sandbox", args.sandbox, "--image", "IMAGE"])
    raise StackError(
        f"--sandbox {args.sandbox} runs the harness bundle's image, and no --image was given. Through the stack"
        f" ({through_make}):\n    {make}\nor against a capture proxy and a policy server you started on this host"
        f" yourself (--proxy-url, --policy-url):\n"
        f"    veri harness build {shlex.quote(str(bundle))}   # prints IMAGE\n    {by_hand}")
