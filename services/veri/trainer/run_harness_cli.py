"""`veri run-harness` command line and its printed summary."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from veri.core.harness import ManifestError
from veri.trainer.run_harness import (RunHarnessError, RunOptions, default_control_token, default_out,
                                      load_task, run, summary_rows)


def register(commands: argparse._SubParsersAction) -> None:
    command = commands.add_parser("run-harness", help="run a harness bundle N times against the current policy")
    command.add_argument("--bundle", type=Path, required=True, help="harness bundle folder (veri-harness.toml)")
    source = command.add_mutually_exclusive_group(required=True)
    source.add_argument("--task", help="one task as JSON (a dataset row, or just a prompt)")
    source.add_argument("--dataset", type=Path, help="JSONL dataset; pick the row with --index")
    command.add_argument("--index", type=int, default=0)
    command.add_argument("-n", type=int, default=1, help="rollouts to run (one GRPO group)")
    command.add_argument("--out", type=Path, default=None, help="where rollout records go")
    command.add_argument("--sandbox", choices=["docker", "local"], default="docker",
                         help="docker (gVisor, default) or local (an unsandboxed subprocess: development only)")
    command.add_argument("--proxy-url", default=os.environ.get("VERI_PROXY_URL", "http://127.0.0.1:8000"))
    command.add_argument("--model-name", default=os.environ.get("VERI_MODEL", "policy"))
    command.add_argument("--max-turns", type=int, default=8)
    command.add_argument("--timeout", type=float, default=300.0, help="harness_timeout_s")
    command.add_argument("--no-up", action="store_true", help="never start the stack")
    command.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    out = (args.out or default_out()).resolve()
    try:
        options = RunOptions(
            bundle=args.bundle.resolve(), task=load_task(args.task, args.dataset, args.index), task_index=args.index,
            n=args.n, out=out, sandbox=args.sandbox, proxy_url=args.proxy_url.rstrip("/"),
            control_token=default_control_token(), model_name=args.model_name, max_turns=args.max_turns,
            timeout_s=args.timeout, start_stack=not args.no_up,
        )
        collected = run(options)
    except (RunHarnessError, ManifestError) as error:
        print(f"veri run-harness: {error}", file=sys.stderr)
        return 1
    console = Console(width=max(140, shutil.get_terminal_size().columns))
    table = Table(title=f"{args.bundle.name}: {len(collected)} rollout(s) of task {args.index}")
    for column in ("rollout", "status", "turns", "tokens p/c/env", "prompt source per span", "verdicts", "answer"):
        table.add_column(column)
    rows = summary_rows(collected)
    for row in rows:
        table.add_row(str(row["rollout"]), f"{row['status']} ({row['exit']})", str(row["turns"]),
                      f"{row['prompt_tokens']}/{row['completion_tokens']}/{row['env_tokens']}",
                      " ".join(row["prompt_sources"]), ", ".join(row["verdicts"]) or "-", row["answer"][:80])
    console.print(table)
    for row in rows:
        if row["stderr_tail"]:
            console.print(f"[dim]rollout {row['rollout']} stderr:[/dim] {row['stderr_tail']}")
    console.print(f"records: {out}  (inspect one: veri debug {out}/task-{args.index}/rollout-0.json)")
    return 0
