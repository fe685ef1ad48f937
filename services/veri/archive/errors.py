"""What the archive refuses or cannot do: one line that says what to do.

    ArchiveError
    ├── JobError         a job name that is not a folder name; a job that cannot start (the trainer raises it too)
    ├── ArchiveInUse     another trainer holds the job's archive (writer.py)
    └── StateVolumeFull  the job's folder ran out of disk space (volume.py)

`veri train` and `veri eval` catch them with their own failures (services/trainer/errors.py,
loop/evals/errors.py) and print the message, no traceback.
"""

from __future__ import annotations


class ArchiveError(RuntimeError):
    """An expected failure around a job's folder; the message says what to do."""


class JobError(ArchiveError):
    """The job cannot start, or its folder cannot be used; the message says what to do."""


class ArchiveInUse(ArchiveError):
    """Another process (or another JobArchive in this one) is writing the same job archive."""


class StateVolumeFull(ArchiveError):
    """The volume of the job's folder filled up: the job stopped (job.json says so); free space, then resume."""
