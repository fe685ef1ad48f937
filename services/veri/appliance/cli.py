"""`veri stack-env CONFIG`: the settings the compose stack needs for a job."""

from __future__ import annotations

import argparse

from veri.appliance import stack_env


def register(commands: argparse._SubParsersAction) -> None:
    stack_env.register(commands)
