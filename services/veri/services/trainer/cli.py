"""`veri train CONFIG [--resume]` — GRPO on harness rollouts, against a running policy server and proxy;
`veri validate CONFIG` — every problem of a job config at once, before it runs.

Ctrl-C or SIGTERM stops it (`interrupt`): the running step's sandboxes are removed, checkpoints stay,
one line says how to continue, exit status 130.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from veri.core import envs
from veri.core.state import JOBS_HELP, jobs_dir
from veri.loop.collect.stack_args import add_stack_arguments, command_options, harbor_tasks_of, refuse_without_image

STOPPED_EXIT = 130  # 128 + SIGINT, what a shell reports for Ctrl-C


# (the job, --sandbox, --image) -> LaunchSettings.harbor_tasks: veri/cli.py hands in tools/tasks/job.py's
HarborTasks = Callable[[Any, str, "str | None"], dict[str, dict[str, Any]]]


def register(commands: argparse._SubParsersAction, *, harbor_tasks: HarborTasks | None = None) -> None:
    train = commands.add_parser("train", help="train the policy with GRPO on harness rollouts (TRL)")
    train.add_argument("config", type=Path, help="job file (.yaml or .toml)")
    train.add_argument("--resume", action="store_true", help="continue the job from its last checkpoint")
    train.add_argument("--name", default=None, help="job name: its folder under --output (default: the config's stem)")
    train.add_argument("--output", type=Path, default=None, help=f"where job folders live (default {JOBS_HELP})")
    add_stack_arguments(train, policy_note="a vLLM job's every replica")
    train.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                       help="serve the job's Prometheus metrics (GET /metrics) on this port while it runs"
                            " (default: off)")
    train.add_argument("--metrics-host", default="127.0.0.1",
                       help="address for --metrics-port (0.0.0.0 to be scraped from another container)")
    train.set_defaults(func=_train, command_options=command_options(train), harbor_tasks=harbor_tasks)

    validate = commands.add_parser("validate", help="check a job config: every problem at once, each with its fix")
    validate.add_argument("config", type=Path, help="job file (.yaml or .toml)")
    validate.add_argument("--gpus", type=int, default=None,
                          help="plan the GPU layout for a box with N NVIDIA GPUs instead of this machine")
    validate.add_argument("--base-dir", type=Path, default=None,
                          help="where relative paths start (default: the current directory)")
    validate.set_defaults(func=_validate)


def _validate(args: argparse.Namespace) -> int:
    from veri.gpu.planner import GpuInventory
    from veri.services.trainer.validation_hook import TRAINER_CHECKS
    from veri.validation.run import check_config

    gpus = GpuInventory.nvidia(args.gpus) if args.gpus is not None else None
    report = check_config(args.config, base_dir=args.base_dir, gpus=gpus, trainer_checks=TRAINER_CHECKS)
    for problem in report.problems:
        print(f"problem: {problem}")
    for note in report.notes:
        print(f"note: {note}")
    count = len(report.problems)
    print(f"{args.config}: " + (f"{count} problem{'s' if count != 1 else ''}" if count else "OK"))
    return 1 if count else 0


def _train(args: argparse.Namespace) -> int:
    from veri.services.trainer.errors import TRAIN_FAILURES
    from veri.services.trainer.ui.interrupt import install_stop_handlers

    try:
        _refuse_without_image(args)  # before --output takes its default: the commands carry what was given
    except TRAIN_FAILURES as error:
        print(f"veri train: {error}", file=sys.stderr)
        return 1
    install_stop_handlers()
    args.output = args.output or jobs_dir()
    try:
        return _run_train(args)
    except KeyboardInterrupt:
        print(stopped_message(args.output.resolve() / (args.name or args.config.stem), _resume_command(args)),
              file=sys.stderr, flush=True)
        return STOPPED_EXIT


def _refuse_without_image(args: argparse.Namespace) -> None:
    """Without --image: the commands that run this job, make train (its RESUME and NAME) or by hand."""
    import shlex

    make = f"make train CONFIG={shlex.quote(str(args.config))}" + (" RESUME=1" if args.resume else "")
    make += f" NAME={shlex.quote(args.name)}" if args.name else ""
    refuse_without_image(args, command="train", make=make,
                         through_make="it builds the image, brings the stack up with the job's model and sampling,"
                                      " runs this job in the trainer container, archive in the jobs folder")


def _run_train(args: argparse.Namespace) -> int:
    from veri.archive import job_layout
    from veri.infra.quiet import quiet_libraries
    from veri.services.trainer.errors import TRAIN_FAILURES
    from veri.services.trainer.job import TrainOptions, run_job
    from veri.services.trainer.validation_hook import TRAINER_CHECKS
    from veri.validation.run import load_config

    options = TrainOptions(
        proxy_url=args.proxy_url, policy_urls=[url for url in args.policy_url.split(",") if url],
        output_root=args.output,
        job_name=args.name or args.config.stem, sandbox=args.sandbox, image=args.image,
        launcher_url=args.launcher_url, control_token=args.control_token, resume=args.resume,
        metrics_port=args.metrics_port, metrics_host=args.metrics_host,
    )
    try:
        # Before anything imports them: the libraries' noise goes to the job's log, not the console.
        with quiet_libraries(job_layout(options.output_root, options.job_name).libraries_log):
            config = load_config(args.config, base_dir=args.base_dir, trainer_checks=TRAINER_CHECKS)
            # a Harbor dataset: its images and trees, once, before any rollout (or as the host staged them)
            options = replace(options, harbor_tasks=harbor_tasks_of(args, config))
            final = run_job(config, options)
    # expected failures: one line with the fix, no traceback (services/trainer/errors.py)
    except TRAIN_FAILURES as error:
        print(f"veri train: {error}", file=sys.stderr)
        return 1
    print(f"final model: {final}")
    return 0


def stopped_message(job_dir: Path, resume_command: str) -> str:
    """One line: the step it stopped in, the checkpoint a resume starts from, the command."""
    from veri.archive import ArchiveLayout, checkpoint_step, latest_checkpoint, read_metrics

    layout = ArchiveLayout(job_dir)
    done = read_metrics(layout.metrics)
    step = done[-1]["step"] + 1 if done else 0
    checkpoint = latest_checkpoint(layout.checkpoints)
    kept = (f"checkpoint kept: {checkpoint} (resuming restarts at step {checkpoint_step(checkpoint)})"
            if checkpoint else "no checkpoint yet (resuming starts over at step 0)")
    return f"veri train: stopped in step {step}, its sandboxes removed; {kept}; continue with: {resume_command}"


def _resume_command(args: argparse.Namespace) -> str:
    if command := os.environ.get(envs.VERI_RESUME_COMMAND):
        return command
    given = sys.argv[1:] if sys.argv[1:2] == ["train"] else ["train", str(args.config)]
    return shlex.join(["veri", *given, *([] if args.resume else ["--resume"])])
