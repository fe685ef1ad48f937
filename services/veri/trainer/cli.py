"""`veri train` (train_cli.py), `veri validate CONFIG` and `veri debug FILE...` — train, check a job before
it runs, explain a rollout after."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from veri.trainer import train_cli


def register(commands: argparse._SubParsersAction) -> None:
    train_cli.register(commands)

    validate = commands.add_parser("validate", help="check a job config: every problem at once, each with its fix")
    validate.add_argument("config", type=Path, help="job file (.yaml or .toml)")
    validate.add_argument("--gpus", type=int, default=None,
                          help="plan the GPU layout for a box with N NVIDIA GPUs instead of this machine")
    validate.add_argument("--base-dir", type=Path, default=None,
                          help="where relative paths start (default: the current directory)")
    validate.set_defaults(func=_validate)

    debug = commands.add_parser("debug", help="explain which episode rule fired for each rollout, span by span")
    debug.add_argument("files", nargs="+", type=Path, help="rollout records (.jsonl / .json)")
    debug.add_argument("--model", type=Path, default=None, help="model folder: decode differing tokens to text")
    debug.set_defaults(func=_debug)


def _validate(args: argparse.Namespace) -> int:
    from veri.core.config import check_config
    from veri.core.layout import GpuInventory
    from veri.trainer.rewards import check_reward_functions

    gpus = GpuInventory.nvidia(args.gpus) if args.gpus is not None else None
    report = check_config(args.config, base_dir=args.base_dir, gpus=gpus, reward_check=check_reward_functions)
    for problem in report.problems:
        print(f"problem: {problem}")
    for note in report.notes:
        print(f"note: {note}")
    count = len(report.problems)
    print(f"{args.config}: " + (f"{count} problem{'s' if count != 1 else ''}" if count else "OK"))
    return 1 if count else 0


def _debug(args: argparse.Namespace) -> int:
    from veri.trainer.debug import explain, read_records

    decoder = None
    if args.model is not None:
        from transformers import AutoTokenizer

        decoder = AutoTokenizer.from_pretrained(args.model)
    status = 0
    for path in args.files:
        try:
            records = read_records(path)
        except (OSError, ValueError) as error:  # ValueError includes JSON errors
            print(f"veri debug: {path}: {error}", file=sys.stderr)
            status = 2
            continue
        for number, record in enumerate(records, 1):
            try:
                text = explain(record, decoder)
            except ValueError as error:  # includes pydantic's ValidationError: a span veri cannot read
                print(f"veri debug: {path} record {number}: {error}", file=sys.stderr)
                status = 2
                continue
            print(f"== {path} record {number}")
            print(text)
    return status
