"""`veri export sft JOB` (a job's trained rows as an SFT dataset) and `veri sft CONFIG` (TRL's SFTTrainer on it)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from veri.core.state import JOBS_HELP, jobs_dir


def register(commands: argparse._SubParsersAction) -> None:
    export = commands.add_parser("export", help="a job archive's rows as a dataset for other trainers")
    kinds = export.add_subparsers(dest="kind", required=True, metavar="KIND")
    sft = kinds.add_parser("sft", help="the job's trained rows (exact token ids, the environment mask, the"
                                       " messages) as JSONL TRL's SFTTrainer takes (docs/exporting.md)")
    sft.add_argument("job", metavar="JOB", help="a job (or eval) folder's name under --output, or its path")
    sft.add_argument("--min-reward", type=float, default=None, metavar="R",
                     help="only rollouts whose reward is >= R (rejection sampling: a job's best rollouts)")
    sft.add_argument("--min-verifier-reward", type=float, default=None, metavar="R",
                     help="Harbor tasks: only rollouts whose tests' own `reward` (reward.json's, else reward.txt's)"
                          " is >= R, whatever the job's reward functions made of it. A rollout whose tests could"
                          " not run is never exported (docs/harbor-tasks.md)")
    sft.add_argument("--steps", default=None, metavar="A:B",
                     help="only steps A..B-1 (Python's slice: 2:, :10, or one step K)")
    sft.add_argument("--out", type=Path, default=None, metavar="FILE",
                     help="the JSONL file to write (default build/exports/<job>.sft.jsonl)")
    sft.add_argument("--output", type=Path, default=None, help=f"where job folders live (default {JOBS_HELP})")
    sft.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    sft.set_defaults(func=_export_sft)

    train = commands.add_parser("sft", help="fine-tune a model with TRL's SFTTrainer on `veri export sft` rows"
                                            " (only sampled tokens carry loss): a warm start before GRPO")
    train.add_argument("config", type=Path, help="the sft file (.yaml or .toml): model, dataset, output_dir, ...")
    train.set_defaults(func=_sft)


def _export_sft(args: argparse.Namespace) -> int:
    from veri.tools.export.errors import ExportError
    from veri.tools.export.rows import export_sft, parse_steps, resolve_job

    try:
        layout = resolve_job(args.job, args.output or jobs_dir())
        out = args.out or Path("build/exports") / f"{layout.dir.name}.sft.jsonl"
        summary = export_sft(layout, out, min_reward=args.min_reward, min_verifier_reward=args.min_verifier_reward,
                             steps=parse_steps(args.steps))
    except ExportError as error:
        print(f"veri export sft: {error}", file=sys.stderr)
        return 1
    print(json.dumps(summary.as_dict(), indent=1) if args.json else summary.text())
    return 0


def _sft(args: argparse.Namespace) -> int:
    from veri.core.problems import ProblemsError
    from veri.tools.export.errors import ExportError
    from veri.tools.export.sft import load_sft_config, run_sft

    try:
        run_sft(load_sft_config(args.config))
    except (ExportError, ProblemsError) as error:
        print(f"veri sft: {error}", file=sys.stderr)
        return 1
    return 0
