"""`ConsoleService`: every question the console's pages and JSON API ask, answered from the job folders
(`JobFolders`) and each job's archive index (`ArchiveIndex`, opened read-only per request)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from veri.archive import ArchiveIndex, ArchiveLayout, RolloutQuery, read_job_file, read_metrics
from veri.core.episodes import RolloutStatus
from veri.core.rollout_record import RolloutRecord
from veri.core.rules import Rule
from veri.services.console.decoder import job_decoder
from veri.services.console.errors import NotFound
from veri.services.console.jobs import JobFolders, JobSummary, summarize
from veri.services.console.protocol import ArchivePage
from veri.services.console.settings import ConsoleSettings
from veri.services.console.tokens import TokenView, token_view
from veri.services.console.trajectory import TrajectoryView, trajectory_view

SHOWN_EXISTING = 40  # names listed in a 404
SAME_TASK_ROWS = 2000  # rollouts on the same-task page


@dataclass
class RolloutRef:
    job: str
    step: int
    task: int
    rollout: int

    @property
    def url(self) -> str:
        return f"/jobs/{self.job}/steps/{self.step}/tasks/{self.task}/rollouts/{self.rollout}"


@dataclass
class ArchiveResult:
    page: ArchivePage
    rows: list[dict[str, Any]]
    total: int
    steps: list[int]  # steps with rollouts (the facet's choices)
    statuses: list[str]
    rules: list[str]

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.page.per_page))


class ConsoleService:
    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        self.folders = JobFolders(settings.jobs_dir)

    # --- jobs ----------------------------------------------------------------------------------------

    def jobs(self) -> list[JobSummary]:
        return self.folders.summaries()

    def layout(self, job: str) -> ArchiveLayout:
        return self.folders.layout(job)

    def job(self, job: str) -> tuple[JobSummary, dict[str, Any]]:
        """The job's summary and its job.json (config, model, ...; {} for a job from before it)."""
        layout = self.layout(job)
        return summarize(job, layout), read_job_file(layout)

    def evals(self, job: str) -> list[dict[str, Any]]:
        """The job's evals (`veri eval` archives beside it that name it)."""
        self.layout(job)
        return self.folders.evals_of(job)

    def signals(self, job: str) -> list[dict[str, Any]]:
        """The job's reward-hacking signals (veri.archive.signals), at the thresholds of its own `signals:`."""
        from pydantic import ValidationError

        from veri.archive.signals import detect_archive
        from veri.core.signals import SignalsConfig

        layout = self.layout(job)
        raw = (read_job_file(layout).get("config") or {}).get("signals") or {}
        try:
            thresholds = SignalsConfig.model_validate(raw)
        except ValidationError:  # a job from another version: the defaults still say something
            thresholds = SignalsConfig()
        # the launcher service writes outputs under <state>/outputs/<job>/ (in-process ones: the job's own)
        launcher_outputs = self.settings.state_dir / "outputs" / job
        return [raised.as_dict() for raised in detect_archive(layout.dir, thresholds, output_roots=[launcher_outputs])]

    def metrics(self, job: str) -> list[dict[str, Any]]:
        return read_metrics(self.layout(job).metrics)

    def timeline(self, job: str, step: int | None = None) -> tuple[list[int], dict[str, Any] | None]:
        """The steps with a timeline line (completed steps only: a stopped step's line is skipped), and the
        line of `step` (None: the latest; None too when the job has none yet)."""
        layout = self.layout(job)
        completed = {line["step"] for line in read_metrics(layout.metrics)}
        lines = {line["step"]: line for line in read_metrics(layout.timeline) if line["step"] in completed}
        steps = sorted(lines)
        if step is None:
            return steps, lines[steps[-1]] if steps else None
        if step not in lines:
            raise NotFound(f"the timeline of step {step} in job {job!r}", [f"step {s}" for s in steps]
                           [-SHOWN_EXISTING:], "a step's timeline is written with its metrics line")
        return steps, lines[step]

    def recent_metrics(self, job: str, steps: int) -> list[dict[str, Any]]:
        """The last `steps` metrics lines, from the index ([] before the trainer has written one)."""
        if not self.layout(job).index.is_file():
            return []
        with self.index(job) as index:
            return index.recent_metrics(steps)

    @contextlib.contextmanager
    def index(self, job: str) -> Iterator[ArchiveIndex]:
        layout = self.layout(job)
        if not layout.index.is_file():  # a job whose trainer has not opened its archive yet
            raise NotFound(f"archive index of job {job!r}", [], "the trainer writes index.sqlite as it starts")
        with ArchiveIndex(layout.dir) as index:
            yield index

    # --- the archive ---------------------------------------------------------------------------------

    def archive(self, job: str, page: ArchivePage) -> ArchiveResult:
        statuses, rules = [s.value for s in RolloutStatus], [r.value for r in Rule]
        if not self.layout(job).index.is_file():
            return ArchiveResult(page, [], 0, [], statuses, rules)
        with self.index(job) as index:
            rows, total = index.search_page(page.query, limit=page.per_page, offset=page.offset)
            steps = index.steps_with_rollouts()
        return ArchiveResult(page, rows, total, steps, statuses, rules)

    def same_task(self, job: str, task: int) -> tuple[list[dict[str, Any]], int]:
        """The rollouts of task `task`, step by step (the same-task-across-steps view): the first
        SAME_TASK_ROWS of them, and how many there are (the archive's task facet pages through all)."""
        query = RolloutQuery(task_index=task)
        with self.index(job) as index:
            rows, total = index.search_page(query, limit=SAME_TASK_ROWS)
            if not rows:
                raise NotFound(f"task {task} in job {job!r}", [f"task {t}" for t in index.task_indexes()]
                               [:SHOWN_EXISTING])
        return rows, total

    # --- one rollout ---------------------------------------------------------------------------------

    def rollout(self, ref: RolloutRef) -> tuple[dict[str, Any], RolloutRecord]:
        with self.index(ref.job) as index:
            row = index.find(ref.step, ref.task, ref.rollout)
            if row is None:
                raise self._missing(index, ref)
            return row, index.read_rollout(row["path"])

    def trajectory(self, ref: RolloutRef) -> tuple[dict[str, Any], TrajectoryView]:
        row, record = self.rollout(ref)
        log_file = self.layout(ref.job).inside(row["path"]).with_suffix(".log")
        harness_log = log_file.read_text(encoding="utf-8", errors="replace") if log_file.is_file() else None
        return row, trajectory_view(record, harness_log)

    def tokens(self, ref: RolloutRef, number: int = 1) -> tuple[dict[str, Any], TokenView]:
        row, record = self.rollout(ref)
        _, info = self.job(ref.job)
        try:
            return row, token_view(record, job_decoder(self.layout(ref.job), info), number)
        except ValueError:
            rows = [f"row {n}" for n in range(1, max(1, len(record.episode.rows)) + 1)]
            raise NotFound(f"row {number} of rollout {ref.rollout}", rows, "?row=1 is the one ending at the final"
                           " answer") from None

    def log_file(self, job: str) -> Path:
        return self.layout(job).train_log

    def check_step(self, job: str, step: int) -> None:
        with self.index(job) as index:
            steps = [entry["step"] for entry in index.list_steps()]
        if step not in steps:
            raise NotFound(f"step {step} of job {job!r}", [f"step {s}" for s in steps][-SHOWN_EXISTING:],
                           "steps appear once their first rollout is archived")

    def _missing(self, index: ArchiveIndex, ref: RolloutRef) -> NotFound:
        rows = index.search(RolloutQuery(step_min=ref.step, step_max=ref.step), limit=SHOWN_EXISTING)
        if not rows:
            steps = [f"step {entry['step']}" for entry in index.list_steps()][-SHOWN_EXISTING:]
            return NotFound(f"step {ref.step} of job {ref.job!r}", steps)
        exists = [f"task {row['task_index']} rollout {row['rollout_index']}" for row in rows]
        return NotFound(f"task {ref.task} rollout {ref.rollout} in step {ref.step} of job {ref.job!r}", exists)
