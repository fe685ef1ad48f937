"""A Harbor task's /logs/verifier files (ctrf.json, test-stdout.txt, reward files, whatever test.sh wrote),
archived beside the rollout's record in trajectories/step-<N>/task-<M>/rollout-<K>/verifier/.

The launcher already cut each file to its tail (services/launcher/verifier.py); the archive caps a
rollout's files together at VERIFIER_FILES_MAX bytes so a chatty test suite cannot fill the state volume
(a few thousand rollouts a job): files past the cap are named in the record's `files_left_out`."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from veri.archive.layout import atomic_write

VERIFIER_FILES_MAX = 2 << 20  # bytes of verifier files archived per rollout, all files together
VERIFIER_DIR = "verifier"


def verifier_dir(rollout_path: Path) -> Path:
    """The verifier/ folder of the rollout whose record is `rollout_path` (rollout-<K>.json)."""
    return rollout_path.with_suffix("") / VERIFIER_DIR


def write_verifier_files(folder: Path, files: dict[str, str],
                         limit: int = VERIFIER_FILES_MAX) -> tuple[list[str], list[str]]:
    """Write `files` (name -> text) under `folder`, smallest first, until `limit` bytes; returns
    (written, left out) names. A name that would leave the folder is left out."""
    written: list[str] = []
    left_out: list[str] = []
    used = 0
    for name, text in sorted(files.items(), key=lambda item: (len(item[1]), item[0])):
        relative = PurePosixPath(name)
        data = text.encode("utf-8", errors="replace")
        if relative.is_absolute() or not relative.parts or ".." in relative.parts or used + len(data) > limit:
            left_out.append(name)
            continue
        atomic_write(folder.joinpath(*relative.parts), data)
        used += len(data)
        written.append(name)
    return sorted(written), sorted(left_out)
