"""The job archive: every rollout record, per-step metrics and logs of one job, faceted by policy step.

    layout.py   where the files are, and the crash-safe ways they are written and read
    writer.py   `JobArchive`, the trainer's one writer per job (steps, resume)
    index.py    index.sqlite, the console's index, rebuilt from the files: its schema and rows;
                index_writer.py (the trainer's side, rebuild), index_reader.py (the console's, read-only),
                index_query.py (filters and orders)
    status.py   job.json: running / finished / failed / stopped
    metrics.py  a step's metrics from its rollouts; TensorBoard / W&B sinks
    resume.py   checkpoints: the one to resume from, and lining the archive up with it
"""

from veri.archive.index import read_rollout
from veri.archive.index_query import RolloutQuery
from veri.archive.index_reader import ArchiveIndex, IndexOutdated
from veri.archive.index_writer import IndexReport, rebuild_index
from veri.archive.layout import ArchiveLayout, read_metrics
from veri.archive.metrics import step_metrics
from veri.archive.resume import checkpoint_step, latest_checkpoint, prepare_resume
from veri.archive.status import JobStatus, job_status, read_job_file
from veri.archive.writer import ArchiveInUse, JobArchive, job_layout

__all__ = [
    "ArchiveInUse", "ArchiveIndex", "ArchiveLayout", "IndexOutdated", "IndexReport", "JobArchive", "JobStatus",
    "RolloutQuery", "checkpoint_step", "job_layout", "job_status", "latest_checkpoint", "prepare_resume",
    "read_job_file", "read_metrics", "read_rollout", "rebuild_index", "step_metrics",
]
