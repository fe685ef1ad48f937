"""`veri job status JOB`: where a job stands, from its folder (`ArchiveLayout`): the last completed step,
the checkpoint a resume starts from, the final model. Scripts ask this instead of globbing the folder
(`--field checkpoint` prints that one value, empty when there is none)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from veri.core import envs

FIELDS = ("job", "last_step", "checkpoint", "resume_step", "model")


def register(commands: argparse._SubParsersAction) -> None:
    job = commands.add_parser("job", help="a training job's state, from its folder")
    actions = job.add_subparsers(dest="action", required=True, metavar="ACTION")
    status = actions.add_parser("status", help="last completed step, the checkpoint to resume from, the final model")
    status.add_argument("job", help="the job's name (its folder under --jobs) or its folder")
    status.add_argument("--jobs", type=Path, default=None,
                        help=f"where job folders live (default ${envs.VERI_STATE_DIR}/jobs, or build/state/jobs)")
    status.add_argument("--field", choices=FIELDS, default=None, help="print only this value")
    status.set_defaults(func=_status)


def job_status(folder: Path) -> dict[str, str]:
    from veri.trainer.archive import ArchiveLayout, checkpoint_step, latest_checkpoint, read_metrics

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
        root = args.jobs or Path(os.environ.get(envs.VERI_STATE_DIR) or "build/state") / "jobs"
        folder = root / args.job
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
