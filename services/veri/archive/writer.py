"""The job archive: every rollout record, per-step metrics and logs of one job, faceted by policy step.

Files are the source of truth (layout and write rules: `layout`); index.sqlite serves the
console and is rebuilt from the files whenever it is missing, damaged or behind (`index`).

Steps. Archive step N holds the rollouts sampled by policy version N, i.e. at TRL `state.global_step`
N, which the optimizer step N -> N+1 trains on. A step is *complete* once its metrics line is in
metrics.jsonl (`write_step_metrics` is the commit point); rollouts of a later step are leftovers of
a run that stopped mid-step. Writing into a completed step raises: it would duplicate archived work.

Resume, end to end (`make train CONFIG=... RESUME=1`):
  1. TRL saves checkpoints into output_dir/checkpoint-<global_step> (`save_steps`); trainer_state.json
     is written last, so `latest_checkpoint` skips a folder without a readable one (a save cut short).
  2. On start with resume, the loop calls `prepare_resume(archive, output_dir)`: it finds that
     checkpoint (global_step G) and `discard_incomplete_steps(after=G - 1)`: every archive step >= G and
     every incomplete step moves to incomplete/ (never deleted), with its index rows and metrics lines,
     because the resumed run samples step G again from the restored weights.
  3. `trainer.train(resume_from_checkpoint=str(checkpoint))` restores weights, optimizer, scheduler,
     RNG and global_step; the next rollouts are written as step G. TensorBoard hides the events of
     the stopped run from step G on (`purge_step`); W&B resumes the same run (id in wandb-run-id).
  Without a checkpoint, training restarts at step 0 and every archived step is set aside.
  Write a step's metrics before TRL saves that step's checkpoint (a TrainerCallback's `on_step_end`
  runs before the save); otherwise a crash between the two leaves a step that is trained but unarchived.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Self

from veri.archive.errors import ArchiveInUse, JobError, StateVolumeFull
from veri.archive.index import index_row
from veri.archive.index_reader import ArchiveIndex
from veri.archive.index_writer import IndexWriter
from veri.archive.layout import ArchiveLayout, append_line, atomic_write, cut_partial_tail, read_metrics
from veri.archive.metrics import MetricSinks
from veri.archive.status import JobStatus, write_job_end, write_job_start
from veri.archive.volume import filled_up, full_message, reserve
from veri.core.rollout_record import RolloutRecord
from veri.infra.logging import event_line

JOB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def job_layout(root: Path, job_name: str) -> ArchiveLayout:
    """The folder of job `job_name` under `root`; a name that is not a plain folder name is a JobError."""
    if not JOB_NAME.match(job_name):
        raise JobError(f"job name {job_name!r}: use letters, digits, '.', '_' and '-' (a folder name)")
    return ArchiveLayout(Path(root).resolve() / job_name)


class JobArchive:
    """The trainer's writer for root/job_name. One per job at a time (a lock file enforces it).

    Thread-safe: rollouts may be written from several threads.
    """

    def __init__(self, root: Path, job_name: str) -> None:
        self.job_name = job_name
        self.layout = job_layout(root, job_name)
        self.dir = self.layout.dir
        self._mutex = threading.RLock()
        try:
            for folder in (self.layout.trajectories, self.layout.logs):
                folder.mkdir(parents=True, exist_ok=True)
            self._lock_fd: int | None = _lock(self.layout.writer_lock)
        except OSError as error:
            if filled_up(self.dir, error):
                raise StateVolumeFull(full_message(self.dir)) from error
            raise
        self._reader: ArchiveIndex | None = None
        self._started = False
        try:
            self._keep_reserve()
            self._recover()
            self._index = self._open_index()
        except BaseException:
            _unlock(self._lock_fd)
            raise
        self._last_completed = self.last_completed_step()
        self._sinks = MetricSinks(self.dir, job_name, self.log)

    # --- writing -----------------------------------------------------------------------------------

    def write_rollout(self, step: int, record: RolloutRecord, *, harness_log: str | None = None) -> Path:
        """Archive one rollout of `step` (atomically) and index it; `harness_log` goes to rollout-<K>.log."""
        self._check_open_step(step, "write a rollout into")
        if record.policy_step is None:
            record = record.model_copy(update={"policy_step": step})
        elif record.policy_step != step:
            raise ValueError(f"rollout {record.rollout_id} has policy_step {record.policy_step}, written as {step}")
        path = self.layout.rollout_path(step, record.task_index, record.rollout_index)
        atomic_write(path, record.model_dump_json().encode("utf-8"))
        if harness_log is not None:
            atomic_write(path.with_suffix(".log"), harness_log.encode("utf-8", errors="replace"))
        row = index_row(step, record, self.layout.relative(path))
        with self._mutex:
            self._index.upsert_rollout(row)
        return path

    def write_step_metrics(self, step: int, metrics: dict[str, float | int]) -> None:
        """Complete `step`: append its metrics line, index it, send it to TensorBoard / W&B.

        The line is {"step": N, "wall_time": unix seconds, **metrics}; a non-finite value is written as null.
        """
        with self._mutex:
            self._check_open_step(step, "write metrics for")
            clean = {key: _finite(value) for key, value in metrics.items() if key not in ("step", "wall_time")}
            line = {"step": step, "wall_time": time.time(), **clean}
            append_line(self.layout.metrics, json.dumps(line, allow_nan=False))
            self._last_completed = step
            self._index.upsert_step(step, line)
            self._sinks.write(step, {key: value for key, value in clean.items() if value is not None})

    def write_timeline(self, step: int, timeline: dict[str, Any]) -> None:
        """Append `step`'s timeline line (`trainer.timeline.record`); written before its metrics line, so a
        line whose step has no metrics line is a stopped step's (readers skip it, a resume sets it aside)."""
        with self._mutex:
            self._check_open_step(step, "write the timeline of")
            append_line(self.layout.timeline, json.dumps({**timeline, "step": step}, allow_nan=False))

    def start_job(self, *, model: str, max_steps: int, config: dict[str, Any]) -> None:
        """Say in job.json that training runs; the `with` block's end writes the outcome (`archive.status`)."""
        write_job_start(self.layout, model=model, max_steps=max_steps, config=config)
        self._started = True

    def log(self, message: str, *, level: str = "info", **fields: Any) -> None:
        """Append `message` to logs/train.log as one JSON line, as the services log (`infra/logging.py`)."""
        append_line(self.layout.train_log, event_line("trainer", str(message).rstrip("\n"), level=level, **fields))

    # --- steps and resume --------------------------------------------------------------------------

    def last_completed_step(self) -> int | None:
        """The last step whose metrics line exists in metrics.jsonl (None: no step completed yet)."""
        lines = read_metrics(self.layout.metrics)
        return lines[-1]["step"] if lines else None

    def discard_incomplete_steps(self, after: int | None = None) -> list[int]:
        """Set aside, for resume, every step after the last completed one (and, given `after`, every step
        after `after`): trajectories move to incomplete/step-<N>, metrics lines to incomplete/metrics.jsonl,
        index rows are dropped. Returns the steps set aside, ascending."""
        with self._mutex:
            completed = self.last_completed_step()
            keep = -1 if completed is None else completed
            if after is not None:
                keep = min(keep, after)
            discarded = _set_aside_lines(self.layout.metrics, self.layout.incomplete, keep)
            _set_aside_lines(self.layout.timeline, self.layout.incomplete, keep)
            for step in self.layout.steps_on_disk():
                if step > keep:
                    self.layout.incomplete.mkdir(exist_ok=True)
                    destination = _unused(self.layout.incomplete / f"step-{step}")
                    os.replace(self.layout.step_dir(step), destination)
                    discarded.add(step)
            self._index.drop_steps_after(keep)
            self._last_completed = self.last_completed_step()
            if discarded:
                self.log(f"resume: kept steps <= {keep}; set aside steps {sorted(discarded)} in incomplete/")
            return sorted(discarded)

    # --- reading (the console's helpers, on this archive) ----------------------------------------------

    def list_steps(self) -> list[dict[str, Any]]:
        return self._read().list_steps()

    def rollouts(
        self, step: int | None = None, status: str | None = None, rule: str | None = None, limit: int = 100,
        offset: int = 0, *, trainable: bool | None = None,
    ) -> list[dict[str, Any]]:
        return self._read().rollouts(step, status, rule, limit, offset, trainable=trainable)

    def read_rollout(self, path: str | Path) -> RolloutRecord:
        return self._read().read_rollout(path)

    def metrics(self) -> list[dict[str, Any]]:
        return read_metrics(self.layout.metrics)

    def close(self) -> None:
        with self._mutex:
            if self._lock_fd is None:
                return
            self._sinks.close()
            if self._reader is not None:
                self._reader.close()
            self._index.close()
            self.layout.space_reserve.unlink(missing_ok=True)
            _unlock(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, *tb: object) -> None:
        full = kind is not None and not issubclass(kind, KeyboardInterrupt) and filled_up(self.dir, error)
        if full:  # the reserve makes room for job.json and the last log line
            self.layout.space_reserve.unlink(missing_ok=True)
        try:
            if full:
                self.log(f"stopped: {full_message(self.dir)} (the failure: {type(error).__name__}: {error})")
            if self._started:
                if kind is None:
                    write_job_end(self.layout, JobStatus.FINISHED)
                elif issubclass(kind, KeyboardInterrupt):
                    write_job_end(self.layout, JobStatus.STOPPED)
                elif full:
                    write_job_end(self.layout, JobStatus.FAILED, full_message(self.dir))
                else:
                    write_job_end(self.layout, JobStatus.FAILED, f"{kind.__name__}: {error}")
        finally:
            self.close()
        if full:
            raise StateVolumeFull(full_message(self.dir)) from error

    # --- internals -----------------------------------------------------------------------------------

    def _check_open_step(self, step: int, action: str) -> None:
        if self._lock_fd is None:
            raise RuntimeError(f"archive {self.dir} is closed")
        if step < 0:
            raise ValueError(f"step {step}: steps start at 0")
        if self._last_completed is not None and step <= self._last_completed:
            raise ValueError(
                f"cannot {action} step {step}: step {self._last_completed} is already complete in {self.dir}"
                " (on resume, call discard_incomplete_steps(after=<checkpoint step> - 1) or prepare_resume first)"
            )

    def _keep_reserve(self) -> None:
        try:
            reserve(self.layout.space_reserve)
        except OSError as error:
            if filled_up(self.dir, error):
                raise StateVolumeFull(full_message(self.dir)) from error
            raise

    def _recover(self) -> None:
        """Undo what a crash can leave: a partial metrics line, temp files."""
        cut = cut_partial_tail(self.layout.metrics)
        if cut:
            self.log(f"metrics.jsonl ended in a partial line (a crash mid-write); removed {len(cut)} bytes")
        stale = list(self.layout.stale_temp_files())
        for path in stale:
            path.unlink(missing_ok=True)
        if stale:
            self.log(f"removed {len(stale)} temp file(s) a crashed writer left behind")

    def _open_index(self) -> IndexWriter:
        index = None
        try:
            index = IndexWriter(self.layout.index)
            report = index.sync(self.layout)
        except sqlite3.DatabaseError as error:
            if index is not None:
                index.close()
            self.log(f"index.sqlite unusable ({error}); rebuilding it from the files")
            for suffix in ("", "-journal"):
                Path(f"{self.layout.index}{suffix}").unlink(missing_ok=True)
            index = IndexWriter(self.layout.index)
            report = index.sync(self.layout)
        if report.added or report.dropped:
            self.log(f"index: added {len(report.added)} rollout row(s), dropped {len(report.dropped)} stale")
        for problem in report.unreadable:
            self.log(f"index: unreadable rollout file {problem}")
        return index

    def _read(self) -> ArchiveIndex:
        if self._reader is None:
            self._reader = ArchiveIndex(self.dir)
        return self._reader


def _set_aside_lines(path: Path, incomplete: Path, keep: int) -> set[int]:
    """Move the lines of a per-step JSONL file (metrics, timeline) for steps after `keep` into
    incomplete/<its name>; returns their steps."""
    lines = read_metrics(path)
    dropped = [line for line in lines if line["step"] > keep]
    if dropped:
        for line in dropped:
            append_line(incomplete / path.name, json.dumps(line))
        kept = "".join(json.dumps(line) + "\n" for line in lines if line["step"] <= keep)
        atomic_write(path, kept.encode("utf-8"))
    return {line["step"] for line in dropped}


def _finite(value: Any) -> float | int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    number = float(value)
    return number if math.isfinite(number) else None


def _unused(path: Path) -> Path:
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}~{n}")
    return candidate


def _lock(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise ArchiveInUse(f"another trainer is writing the archive {path.parent} (it holds {path})") from None
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    except OSError:  # e.g. a full volume: let go of the lock
        os.close(fd)
        raise
    return fd


def _unlock(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)  # closing the descriptor releases the flock
