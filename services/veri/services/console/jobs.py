"""The job folders under <state>/jobs and what each one says about itself: the jobs list, `veri jobs`."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from veri.archive import ArchiveLayout, job_layout, job_status, read_job_file, read_metrics
from veri.archive.errors import JobError
from veri.services.console.errors import NotFound

UNKNOWN = "unknown"  # a folder without job.json (written by a veri before it) and no trainer on it


@dataclass(frozen=True)
class JobSummary:
    name: str
    status: str  # running / finished / failed / stopped, or unknown
    model: str
    steps_done: int  # completed steps (metrics lines)
    max_steps: int | None
    last_step: int | None
    reward_trend: list[float | None] = field(default_factory=list)  # reward/mean per completed step
    started_at: float | None = None
    ended_at: float | None = None
    error: str | None = None

    @property
    def duration_s(self) -> float | None:
        if self.started_at is None:
            return None
        end = self.ended_at if self.ended_at is not None else time.time()
        return max(0.0, end - self.started_at)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"duration_s": self.duration_s}


class JobFolders:
    """The jobs of one state folder. A name resolves only to a folder directly under <state>/jobs."""

    def __init__(self, jobs_dir: Path) -> None:
        self.jobs_dir = Path(jobs_dir).resolve()

    def names(self) -> list[str]:
        if not self.jobs_dir.is_dir():
            return []
        return sorted(entry.name for entry in self.jobs_dir.iterdir() if _is_job(entry))

    def layout(self, name: str) -> ArchiveLayout:
        """The folder of job `name`; NotFound (listing the jobs) for any other name."""
        try:
            layout = job_layout(self.jobs_dir, name)
        except JobError:
            layout = None
        if layout is None or layout.dir.parent != self.jobs_dir or not _is_job(layout.dir):
            raise NotFound(f"job {name!r}", self.names(), f"job folders live in {self.jobs_dir}")
        return layout

    def summary(self, name: str) -> JobSummary:
        return summarize(name, self.layout(name))

    def summaries(self) -> list[JobSummary]:
        """Every job, the latest started first."""
        found = [summarize(name, job_layout(self.jobs_dir, name)) for name in self.names()]
        return sorted(found, key=lambda job: (job.started_at or 0.0, job.name), reverse=True)


    def evals_of(self, name: str) -> list[dict[str, Any]]:
        """The evals (`veri eval`) of job `name`, beside it under <state>/jobs: each eval.json's headline,
        the latest first; for an eval archive itself, its own."""
        found = []
        for other in self.names():
            info = _eval_file(job_layout(self.jobs_dir, other))
            if info and (info.get("job") == name or other == name):
                found.append({key: info.get(key) for key in ("name", "checkpoint", "job", "reward_mean",
                                                             "reward_ci", "pass_at_k", "samples_per_task", "k")}
                             | {"name": other, "tasks": len(info.get("tasks") or [])})
        return sorted(found, key=lambda e: e["name"], reverse=True)


def _eval_file(layout: ArchiveLayout) -> dict[str, Any] | None:
    try:
        loaded = json.loads(layout.eval_file.read_bytes())
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


def summarize(name: str, layout: ArchiveLayout) -> JobSummary:
    info = read_job_file(layout)
    status = job_status(layout, info)
    metrics = read_metrics(layout.metrics)
    return JobSummary(
        name=name,
        status=str(status) if status is not None else _status_without_file(layout),
        model=str(info.get("model") or ""),
        steps_done=len(metrics),
        max_steps=info.get("max_steps"),
        last_step=metrics[-1]["step"] if metrics else None,
        reward_trend=[line.get("reward/mean") for line in metrics],
        started_at=info.get("started_at"),
        ended_at=info.get("ended_at"),
        error=info.get("error"),
    )


def _status_without_file(layout: ArchiveLayout) -> str:
    from veri.archive.status import writer_alive

    if writer_alive(layout):
        return "running"
    return "finished" if (layout.model / "config.json").is_file() else UNKNOWN


def _is_job(folder: Path) -> bool:
    """A job folder: the trainer made its archive there (index.sqlite or metrics or logs)."""
    layout = ArchiveLayout(folder)
    return folder.is_dir() and (layout.index.is_file() or layout.job_file.is_file() or layout.train_log.is_file())
