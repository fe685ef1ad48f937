"""`veri stack-env CONFIG`: the compose stack's settings a job needs, as shell assignments.

`make train` evaluates them before `make up`, so the policy serves the job's model and the proxy
samples with the job's settings (the trainer must know what was sampled; nothing is sent per call).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path


def register(commands: argparse._SubParsersAction) -> None:
    command = commands.add_parser("stack-env", help="shell assignments that point the stack at a job's config")
    command.add_argument("config", type=Path)
    command.set_defaults(func=_print)


def stack_env(config_path: Path) -> dict[str, str]:
    from veri.core.config import parse_config, read_config_file

    config = parse_config(read_config_file(config_path))  # structure only: the model may not exist yet
    model = config.model.resolve()
    return {
        "VERI_MODELS_DIR": str(model.parent),
        "VERI_MODEL": model.name,
        "VERI_TEMPERATURE": repr(config.sampling.temperature),
        "VERI_TOP_P": repr(config.sampling.top_p),
        "VERI_MAX_TOKENS": str(config.max_tokens_per_call),
        # empty when none: what compose defaults to, so a running stack is not recreated for it
        "VERI_CHAT_TEMPLATE_KWARGS": json.dumps(config.chat_template_kwargs) if config.chat_template_kwargs else "",
        "VERI_BUNDLE": str(config.harness_bundle),
    }


def _print(args: argparse.Namespace) -> int:
    from veri.core.problems import ProblemsError

    try:
        values = stack_env(args.config)
    except ProblemsError as error:
        print(error, file=sys.stderr)
        return 1
    for key, value in values.items():
        print(f"export {key}={shlex.quote(value)}")
    return 0
