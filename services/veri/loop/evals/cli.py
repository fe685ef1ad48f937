"""`veri eval CONFIG` — a checkpoint's held-out results through the job's own harness, sandboxes, proxy,
policy server and reward functions, with no training; `veri eval CONFIG --compare A B` — two side by side."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from veri.core.state import JOBS_HELP, jobs_dir
from veri.loop.collect.stack_args import (
    add_stack_arguments,
    command_options,
    given_options,
    harbor_tasks_of,
    refuse_without_image,
)

# (the job, --sandbox, --image) -> LaunchSettings.harbor_tasks: veri/cli.py hands in tools/tasks/job.py's
HarborTasks = Callable[[Any, str, "str | None"], dict[str, dict[str, Any]]]


def register(commands: argparse._SubParsersAction, *, harbor_tasks: HarborTasks | None = None) -> None:
    run = commands.add_parser("eval", help="score a checkpoint on held-out tasks through the job's harness,"
                                           " no training; --compare A B: two side by side")
    run.add_argument("config", type=Path, help="the job file (.yaml or .toml): harness, dataset, sampling, rewards")
    first_own = len(run._actions)
    which = run.add_argument_group("weights (default: the config's model)")
    which.add_argument("--model", type=Path, default=None, metavar="DIR", help="a transformers model folder")
    which.add_argument("--job", default=None, help="a training job (its folder under --output)")
    which.add_argument("--step", default=None, metavar="K|final|base",
                       help="with --job: checkpoint-K, the final model (default) or the config's base model")
    tasks = run.add_argument_group("tasks (default: every row of the job's dataset)")
    tasks.add_argument("--tasks", default=None, metavar="A:B", help="the job dataset's rows A..B-1 (Python's slice)")
    tasks.add_argument("--split", type=Path, default=None, metavar="PATH",
                       help="a JSONL file of tasks instead, or a folder of Harbor tasks (a harbor: job's"
                            " held-out split)")
    tasks.add_argument("--held-out", action="store_true",
                       help="with --job: leave out the tasks the job trained on (its archive's task indexes)")
    run.add_argument("-n", "--samples", type=int, default=4, metavar="N", help="samples per task (default 4)")
    run.add_argument("-k", type=int, default=None, metavar="K", help="pass@k's k (default: N)")
    run.add_argument("--temperature", type=float, default=None,
                     help="the sampling temperature, 0 allowed (default: the job's); the proxy must sample at it")
    run.add_argument("--pass-threshold", type=float, default=1.0, metavar="T",
                     help="a sample passes a reward function at a value >= T (default 1.0)")
    run.add_argument("--compare", nargs=2, default=None, metavar=("A", "B"),
                     help="two eval archives (folders, or names under --output) or checkpoints (K, final, base with"
                          " --job; a model folder): each checkpoint is evaluated first; a paired test over the"
                          " tasks both scored")
    run.add_argument("--json", action="store_true", help="print the results as one JSON object")
    run.add_argument("--name", default=None, help="the eval archive's folder under --output"
                                                   " (default: <job>.eval-<checkpoint>-<time>)")
    run.add_argument("--output", type=Path, default=None,
                     help=f"where job and eval folders live (default {JOBS_HELP})")
    # The eval's own options, which `make eval ARGS=...` passes on (make eval sets --output and the stack's).
    own = tuple(action for action in run._actions[first_own:] if action.dest != "output")
    add_stack_arguments(run, policy_note="it serves the evaluated weights afterwards")
    run.set_defaults(func=_eval, eval_options=own, command_options=command_options(run), harbor_tasks=harbor_tasks)


def _eval(args: argparse.Namespace) -> int:
    from veri.loop.evals.errors import eval_failures

    log_to_stderr()
    try:
        _refuse_without_image(args)  # before --output takes its default: the commands carry what was given
        args.output = args.output or jobs_dir()
        if args.compare:
            return _compare(args)
        summary = _run_one(args, model=args.model, job=args.job, step=args.step, name=args.name)
        _print(args, summary)
        return 0
    except eval_failures() as error:
        print(f"veri eval: {error}", file=sys.stderr)
        return 1


def log_to_stderr() -> None:
    """stdout is the report (--json: one JSON object): the sandboxes' and the launcher's log lines go to stderr
    (unconfigured, structlog prints them on stdout)."""
    from veri.infra.logging import configure_service_logging

    configure_service_logging("eval")


def _refuse_without_image(args: argparse.Namespace) -> None:
    """Without --image: the commands that run this eval, make eval with the eval's own options, or by hand."""
    import shlex

    own = given_options(args, args.eval_options)
    make = f"make eval CONFIG={shlex.quote(str(args.config))}"
    make += f" ARGS={shlex.quote(shlex.join(own))}" if own else ""
    refuse_without_image(args, command="eval", make=make,
                         through_make="it builds the image, brings the stack up with the job's model and sampling,"
                                      " runs this eval in the trainer container, archive in the jobs folder")


def _compare(args: argparse.Namespace) -> int:
    from veri.loop.evals.errors import EvalError
    from veri.loop.evals.report import compare_text
    from veri.loop.evals.summary import compare

    if args.model is not None or args.step is not None or args.name is not None:
        raise EvalError("--compare A B names both sides: leave out --model, --step and --name")
    sides = [_side(args, given) for given in args.compare]
    try:
        result = compare(*sides)
    except ValueError as error:
        raise EvalError(f"--compare: {error}") from error
    result |= {"a_summary": _headline(sides[0]), "b_summary": _headline(sides[1])}
    print(json.dumps(result, indent=1) if args.json else compare_text(result))
    return 0


def _side(args: argparse.Namespace, given: str) -> dict[str, Any]:
    """An eval archive's summary, or a checkpoint's, evaluated now."""
    from veri.loop.evals.checkpoints import STEP
    from veri.loop.evals.errors import EvalError
    from veri.loop.evals.run import is_eval_archive, read_eval

    for folder in (Path(given), args.output / given):
        if is_eval_archive(folder):
            return read_eval(folder)
    model = Path(given) if (Path(given) / "config.json").is_file() else None
    if model is None and given not in ("base", "final") and not STEP.match(given):
        raise EvalError(f"--compare {given}: not an eval archive (no eval.json in {given} or {args.output / given}),"
                        " a model folder, nor a checkpoint (K, final or base, with --job)")
    summary = _run_one(args, model=model, job=None if model else args.job, step=None if model else given, name=None)
    if not args.json:
        _print(args, summary)
    return summary


def _run_one(args: argparse.Namespace, *, model: Path | None, job: str | None, step: str | None,
             name: str | None) -> dict[str, Any]:
    from veri.loop.collect.options import TrainOptions
    from veri.loop.evals.checkpoints import resolve_checkpoint
    from veri.loop.evals.errors import EvalError
    from veri.loop.evals.job_checks import EVAL_CHECKS
    from veri.loop.evals.run import EvalOptions, run_eval
    from veri.validation.run import load_config

    config = load_config(args.config, base_dir=args.base_dir, trainer_checks=EVAL_CHECKS)
    checkpoint = resolve_checkpoint(config, model=model, job=job, step=step, jobs_root=args.output)
    name = name or f"{checkpoint.job or args.config.stem}.eval-{checkpoint.label}-{time.strftime('%Y%m%d-%H%M%S')}"
    train = TrainOptions(proxy_url=args.proxy_url, policy_urls=[u for u in args.policy_url.split(",") if u],
                         output_root=args.output, job_name=name, sandbox=args.sandbox, image=args.image,
                         launcher_url=args.launcher_url, control_token=args.control_token,
                         harbor_tasks=harbor_tasks_of(args, config))
    if args.held_out and not args.job:
        raise EvalError("--held-out needs --job JOB: the training job whose tasks to leave out")
    options = EvalOptions(train=train, samples=args.samples, temperature=args.temperature, tasks=args.tasks,
                          split=args.split, k=args.k, pass_threshold=args.pass_threshold,
                          held_out_of=args.output.resolve() / args.job if args.held_out else None)
    return run_eval(config, checkpoint, options)


def _print(args: argparse.Namespace, summary: dict[str, Any]) -> None:
    from veri.loop.evals.report import eval_text

    print(json.dumps(summary, indent=1) if args.json else eval_text(summary), flush=True)


def _headline(summary: dict[str, Any]) -> dict[str, Any]:
    keys = ("name", "archive", "job", "checkpoint", "reward_mean", "reward_ci", "pass_at_k")
    return {key: summary.get(key) for key in keys}
