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
