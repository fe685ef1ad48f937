"""job.json: the job's status as the trainer last wrote it, and where it stands now.

    {"status": "running" | "finished" | "failed" | "stopped", "started_at": unix s, "ended_at": unix s | null,
     "model": str, "max_steps": int, "config": {...the job config...}, "error": str | null}

The trainer writes "running" when it starts training (`JobArchive.start_job`) and the outcome when its
`with JobArchive(...)` block ends: finished (no exception), stopped (Ctrl-C / SIGTERM: KeyboardInterrupt),
failed (any other exception, its text in "error"). A trainer killed outright (SIGKILL, OOM, power) writes
nothing, so a reader that sees "running" checks the writer lock: held means running, free means the
trainer died and the job is reported failed. The check takes the lock for an instant (LOCK_SH|LOCK_NB,
released at once); it works on a read-only mount.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from enum import StrEnum
from typing import Any

from veri.archive.layout import ArchiveLayout, atomic_write


class JobStatus(StrEnum):
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    STOPPED = "stopped"


def write_job_start(layout: ArchiveLayout, *, model: str, max_steps: int, config: dict[str, Any]) -> None:
    info = {"status": JobStatus.RUNNING.value, "started_at": time.time(), "ended_at": None, "model": model,
            "max_steps": max_steps, "config": config, "error": None}
    atomic_write(layout.job_file, json.dumps(info, indent=1, default=str).encode("utf-8"))


def write_job_end(layout: ArchiveLayout, status: JobStatus, error: str | None = None) -> None:
    info = read_job_file(layout)
    info |= {"status": status.value, "ended_at": time.time(), "error": error}
    atomic_write(layout.job_file, json.dumps(info, indent=1, default=str).encode("utf-8"))


def read_job_file(layout: ArchiveLayout) -> dict[str, Any]:
    """job.json as written ({} when the trainer has not written one: a job from before it, or not started)."""
    try:
        loaded = json.loads(layout.job_file.read_bytes())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def job_status(layout: ArchiveLayout, info: dict[str, Any] | None = None) -> JobStatus | None:
    """The job's status now (None: no job.json). "running" only while a trainer holds the writer lock."""
    info = read_job_file(layout) if info is None else info
    try:
        status = JobStatus(str(info.get("status")))
    except ValueError:
        return None
    if status == JobStatus.RUNNING and not writer_alive(layout):
        return JobStatus.FAILED
    return status


def writer_alive(layout: ArchiveLayout) -> bool:
    """True while a trainer holds the archive's writer lock."""
    try:
        fd = os.open(layout.writer_lock, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing releases the shared lock, if taken
    return False
