"""Each sandbox's output folder (VERI_OUTPUT_DIR on the host), for every backend that mounts one:

    prepare_output       a fresh folder, the sandbox user's (uid 1000) while the sandbox runs
    enforce_output_cap   after it: files kept in name order up to the cap, symlinks dropped
    hand_back            then: the folder and all in it to the owner of the folder above, readable by it

Everything else under the output root belongs to the root's owner: under compose that is veri's
services' user (compose.yaml's x-least), so the trainer, which is not root, reads what any harness
left whatever modes it chose. The compose launcher can do both hand-overs because it keeps CHOWN,
FOWNER and DAC_OVERRIDE (compose.yaml says why); a launcher without them (a user's own process, dev)
leaves the folder world-writable and what the harness wrote as it is.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import structlog

from veri.core.harness import HARNESS_UID

log = structlog.get_logger("veri.services.launcher.outputs")


def prepare_output(output_dir: Path) -> None:
    """An empty folder at `output_dir` for the sandbox user; the folders above it made here go to the
    owner of the nearest one that was there (the output root's)."""
    if output_dir.exists() or output_dir.is_symlink():
        shutil.rmtree(output_dir) if output_dir.is_dir() and not output_dir.is_symlink() else output_dir.unlink()
    missing = [p for p in (output_dir.parent, *output_dir.parent.parents) if not p.exists()]
    output_dir.mkdir(parents=True)
    if missing:
        owner = missing[-1].parent.stat()
        for folder in missing:
            _give(folder, owner.st_uid, owner.st_gid)
    try:
        os.chown(output_dir, HARNESS_UID, HARNESS_UID)
        output_dir.chmod(0o755)
    except PermissionError:  # a launcher that is not root: any uid may write
        output_dir.chmod(0o777)


def enforce_output_cap(folder: Path, max_bytes: int) -> bool:
    """Delete files past the cap (and any symlink); True when something was dropped."""
    kept, dropped = 0, False
    for path in sorted(p for p in folder.rglob("*") if p.is_file() or p.is_symlink()):
        size = 0 if path.is_symlink() else path.stat().st_size
        if path.is_symlink() or kept + size > max_bytes:
            path.unlink()
            dropped = True
        else:
            kept += size
    return dropped


def hand_back(folder: Path) -> None:
    """After the sandbox has gone: `folder` and everything in it to the owner of its parent, folders
    u+rwx and files u+r (no setuid, setgid or sticky bit). Symlinks are left alone (enforce_output_cap
    removed them); each folder is opened only once it is the owner's."""
    parent = folder.parent.stat()
    refused = 0
    stack = [folder]
    while stack:
        path = stack.pop()
        refused += not _give(path, parent.st_uid, parent.st_gid)
        try:
            with os.scandir(path) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(Path(entry.path))
                    elif not entry.is_symlink():
                        refused += not _give(Path(entry.path), parent.st_uid, parent.st_gid)
        except PermissionError:
            refused += 1
    if refused:
        log.warning("outputs.not_handed_back", folder=str(folder), entries=refused,
                    why="this launcher may not chown them (compose's has CAP_CHOWN and CAP_FOWNER)")


def _give(path: Path, uid: int, gid: int) -> bool:
    """`path` (not followed) to uid:gid, readable and, for a folder, enterable by its owner; False when
    this process may not."""
    try:
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode):
            return True
        os.chown(path, uid, gid, follow_symlinks=False)
        os.chmod(path, stat.S_IMODE(mode) & 0o777 | (0o700 if stat.S_ISDIR(mode) else 0o400))
    except PermissionError:
        return False
    return True
