"""`veri job status JOB`: where a job stands, from its folder (`ArchiveLayout`): the last completed step,
the checkpoint a resume starts from, the final model. Scripts ask this instead of globbing the folder
(`--field checkpoint` prints that one value, empty when there is none).

The console's views on the command line (the same code: `veri.services.console.jobs` and
`veri.services.console.downloads`):
`veri jobs` (the jobs list), `veri job show JOB` (status, steps, the last step's metrics, the config),
`veri trajectories download JOB [--step N]` (JSONL rollout records, what `veri debug` reads)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from veri.core.state import JOBS_HELP, jobs_dir

if TYPE_CHECKING:
    from veri.services.console.errors import NotFound

FIELDS = ("job", "last_step", "checkpoint", "resume_step", "model")


def register(commands: argparse._SubParsersAction) -> None:
    job = commands.add_parser("job", help="a training job's state, from its folder")
    actions = job.add_subparsers(dest="action", required=True, metavar="ACTION")
    status = actions.add_parser("status", help="last completed step, the checkpoint to resume from, the final model")
    status.add_argument("job", help="the job's name (its folder under --jobs) or its folder")
    status.add_argument("--jobs", type=Path, default=None,
                        help=f"where job folders live (default {JOBS_HELP})")
    status.add_argument("--field", choices=FIELDS, default=None, help="print only this value")
    status.set_defaults(func=_status)

    show = actions.add_parser("show", help="a job's status, steps, last metrics and config (the console's job page)")
    show.add_argument("job", help="the job's name (its folder under --jobs)")
    _jobs_option(show)
    show.set_defaults(func=_show)

    jobs = commands.add_parser("jobs", help="the jobs: status, model, step k of n, reward, start, duration")
    _jobs_option(jobs)
    jobs.set_defaults(func=_jobs)

    trajectories = commands.add_parser("trajectories", help="a job's archived rollouts")
    verbs = trajectories.add_subparsers(dest="action", required=True, metavar="ACTION")
    download = verbs.add_parser("download", help="rollout records as JSONL (what veri debug reads)")
    download.add_argument("job", help="the job's name (its folder under --jobs)")
    download.add_argument("--step", type=int, default=None, help="only this policy step (default: every step)")
    download.add_argument("--out", type=Path, default=None, help="file to write (default: stdout)")
    _jobs_option(download)
    download.set_defaults(func=_download)


def _jobs_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=Path, default=None,
                        help=f"where job folders live (default {JOBS_HELP})")


def _jobs_dir(given: Path | None) -> Path:
    return given or jobs_dir()


def job_status(folder: Path) -> dict[str, str]:
    from veri.archive import ArchiveLayout, checkpoint_step, latest_checkpoint, read_metrics

    layout = ArchiveLayout(folder)
    done = read_metrics(layout.metrics)
    checkpoint = latest_checkpoint(layout.checkpoints)
    return {
        "job": str(folder),
        "last_step": str(done[-1]["step"]) if done else "",
        "checkpoint": str(checkpoint) if checkpoint else "",
        "resume_step": str(checkpoint_step(checkpoint)) if checkpoint else "0",
        "model": str(layout.model) if (layout.model / "config.json").is_file() else "",
    }


def _status(args: argparse.Namespace) -> int:
    folder = Path(args.job)
    if not folder.is_dir():
        folder = _jobs_dir(args.jobs) / args.job
    if not folder.is_dir():
        print(f"veri job status: no job folder {folder} (give the job's name and --jobs, or its folder)")
        return 2
    status = job_status(folder.resolve())
    if args.field:
        print(status[args.field])
        return 0
    for key, value in status.items():
        print(f"{key}: {value or '-'}")
    return 0


def _jobs(args: argparse.Namespace) -> int:
    from veri.services.console.jobs import JobFolders

    jobs = JobFolders(_jobs_dir(args.jobs)).summaries()
    if not jobs:
        print(f"no jobs in {_jobs_dir(args.jobs)} (make train starts one)")
        return 0
    print(f"{'JOB':24} {'STATUS':9} {'STEP':>9} {'REWARD':>7}  {'STARTED':20} {'DURATION':>9}  MODEL")
    for job in jobs:
        reward = job.reward_trend[-1] if job.reward_trend else None
        steps = f"{job.steps_done}/{job.max_steps or '?'}"
        print(f"{job.name:24} {job.status:9} {steps:>9}"
              f" {'-' if reward is None else f'{reward:.3f}':>7}  {_when(job.started_at):20}"
              f" {_duration(job.duration_s):>9}  {job.model or '-'}")
    return 0


def _show(args: argparse.Namespace) -> int:
    from veri.archive import read_job_file, read_metrics
    from veri.services.console.errors import NotFound
    from veri.services.console.jobs import JobFolders

    folders = JobFolders(_jobs_dir(args.jobs))
    try:
        layout = folders.layout(args.job)
    except NotFound as error:
        return _not_found("job show", error)
    job = folders.summary(args.job)
    print(f"job: {job.name}\nfolder: {layout.dir}\nstatus: {job.status}" + (f" ({job.error})" if job.error else ""))
    print(f"model: {job.model or '-'}\nsteps: {job.steps_done} of {job.max_steps or '?'}")
    print(f"started: {_when(job.started_at)}\nduration: {_duration(job.duration_s)}")
    metrics = read_metrics(layout.metrics)
    if metrics:
        last = metrics[-1]
        print(f"last step {last['step']}:")
        for key in sorted(last):
            if key.startswith(("reward/", "status/", "rule/", "time/", "rollouts", "trainable", "masked")):
                print(f"  {key}: {last[key]}")
    config = read_job_file(layout).get("config")
    print("config:", json.dumps(config, indent=2) if config else "- (no job.json)")
    return 0


def _download(args: argparse.Namespace) -> int:
    from veri.archive import ArchiveIndex, RolloutQuery
    from veri.services.console.downloads import records_jsonl
    from veri.services.console.errors import NotFound
    from veri.services.console.jobs import JobFolders

    try:
        layout = JobFolders(_jobs_dir(args.jobs)).layout(args.job)
    except NotFound as error:
        return _not_found("trajectories download", error)
    query = RolloutQuery(step_min=args.step, step_max=args.step)
    with ArchiveIndex(layout.dir) as index:
        if args.step is not None and not index.count(query):
            steps = ", ".join(str(entry["step"]) for entry in index.list_steps() if entry["rollouts"]) or "none yet"
            print(f"veri trajectories download: job {args.job} has no rollouts in step {args.step} (steps: {steps})",
                  file=sys.stderr)
            return 2
        out = args.out.open("wb") if args.out else sys.stdout.buffer
        count = 0
        try:
            for line in records_jsonl(index, query):
                out.write(line)
                count += 1
        finally:
            if args.out:
                out.close()
    if args.out:
        print(f"{count} rollout records -> {args.out}", file=sys.stderr)
    return 0


def _not_found(command: str, error: NotFound) -> int:
    exists = ", ".join(error.exists) or "none"
    print(f"veri {command}: no {error.what} (jobs: {exists}; give --jobs, the folder holding them)", file=sys.stderr)
    return 2


def _when(stamp: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(stamp)) if stamp else "-"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
