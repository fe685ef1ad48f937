"""The state volume filling up: the room kept for a job's last words, and what they say.

A full disk fails whatever writes next (a rollout record, a metrics line, TRL's checkpoint, torch's own
writer with its own error), and job.json, written last, would fail too. So the archive keeps a small
reserve file in the job folder while it is open (`reserve`); on a failure on a full volume it frees it,
writes job.json `failed` with `full_message`, and the trainer stops with that message (`StateVolumeFull`).
Every archive file is written atomically or appended whole (`layout`), so what is there stays readable.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

RESERVE_BYTES = 256 * 1024  # job.json and a few log lines fit many times over
LOW_SPACE_BYTES = 1 << 20  # under this free, a failed job is taken to have filled its volume
FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def reserve(path: Path) -> None:
    """Write the reserve file (real blocks, not a sparse file); ENOSPC when even that does not fit."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, b"\0" * RESERVE_BYTES)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    os.close(fd)


def free_bytes(folder: Path) -> int | None:
    try:
        stats = os.statvfs(folder)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


def filled_up(folder: Path, error: BaseException | None) -> bool:
    """Did `error` come from the volume of `folder` filling up? An ENOSPC / EDQUOT anywhere in its chain,
    or any failure while the volume has under LOW_SPACE_BYTES free (torch and safetensors name it otherwise)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in FULL_ERRNOS:
            return True
        error = error.__cause__ or error.__context__
    free = free_bytes(folder)
    return free is not None and free < LOW_SPACE_BYTES


def full_message(folder: Path) -> str:
    free = free_bytes(folder)
    left = "" if free is None else f" ({free // 1024} KiB free)"
    return (f"the state volume is full: no space left on device under {folder}{left}. The job stopped; its "
            "archive is whole up to the last completed step. Free space on that volume (old jobs, their "
            "checkpoints/ and weights/) or give the state folder (VERI_STATE_DIR) a larger one, then resume "
            "the job (make train ... RESUME=1, or veri train --resume)")
