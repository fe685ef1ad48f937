"""A sandbox's files on the host, which the docker backend reads and limits (blocking: run in its pool).

The logs folder: three files (stdout, stderr, the exit status) the sandbox's wrapper appends to and the
launcher reads after exit; the output guard: VERI_OUTPUT_DIR measured against its ceiling
(`output_max_bytes + tmpfs_mb`), a folder of more than MAX_OUTPUT_ENTRIES entries counting as unbounded.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

from veri.core.launch import SandboxLimits
from veri.services.launcher.outputs import prepare_output
from veri.services.launcher.tails import Tail

MAX_OUTPUT_ENTRIES = 100_000


def prepare_dirs(output_dir: Path, logs_dir: Path) -> None:
    """A fresh output folder owned by the sandbox user; a logs folder of the launcher's whose three
    files (stdout, stderr, the exit status) the sandbox may write but not replace."""
    prepare_output(output_dir)
    if logs_dir.exists() or logs_dir.is_symlink():
        shutil.rmtree(logs_dir) if logs_dir.is_dir() and not logs_dir.is_symlink() else logs_dir.unlink()
    logs_dir.mkdir()
    logs_dir.chmod(0o755)
    for name in ("stdout", "stderr", "exit"):
        path = logs_dir / name
        path.touch()
        path.chmod(0o666)


def recorded_exit(logs_dir: Path) -> int | None:
    """The harness's exit status as its wrapper wrote it; None when the wrapper did not get to it (the
    sandbox killed) or something else wrote the file."""
    try:
        text = (logs_dir / "exit").read_text(errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and int(text) < 256 else None


def ignore_outcome(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()  # retrieved: no "exception was never retrieved" noise



def logs_dir_of(output_dir: Path) -> Path:
    return output_dir.parent / f".{output_dir.name}.logs"


def read_tails(logs_dir: Path, limit: int) -> tuple[str, str]:
    return file_tail(logs_dir / "stdout", limit), file_tail(logs_dir / "stderr", limit)


def file_tail(path: Path, limit: int) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(fd).st_size
        f.seek(max(0, size - limit))
        chunk = f.read(limit)
    tail = Tail(limit)
    tail.total = size - len(chunk)
    tail.feed(chunk)
    return tail.text()


def tree_size(folder: Path) -> int:
    """Bytes under `folder` (symlinks not followed); a folder of more than MAX_OUTPUT_ENTRIES entries
    counts as unbounded."""
    total, entries, stack = 0, 0, [folder]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    entries += 1
                    if entries > MAX_OUTPUT_ENTRIES:
                        return 1 << 62
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(Path(entry.path))
                    else:
                        total += entry.stat(follow_symlinks=False).st_size
        except FileNotFoundError:
            continue
    return total


def output_ceiling(limits: SandboxLimits) -> int:
    return limits.output_max_bytes + limits.tmpfs_mb * (1 << 20)


def output_note(size: int, ceiling: int) -> str:
    if size >= 1 << 62:
        return f"[veri] VERI_OUTPUT_DIR holds more than {MAX_OUTPUT_ENTRIES} files: the sandbox was killed"
    return (f"[veri] VERI_OUTPUT_DIR grew to {size >> 20} MiB, past {ceiling >> 20} MiB "
            "(output_max_bytes + tmpfs_mb): the sandbox was killed")
