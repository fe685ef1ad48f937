"""Where a job keeps its files (`ArchiveLayout`, the one owner of the job folder's layout), and the
crash-safe ways the archive writes and reads them.

    <root>/<job_name>/
        trajectories/step-<N>/task-<M>/rollout-<K>.json   one RolloutRecord (its JSON, as `veri debug` reads)
        trajectories/step-<N>/task-<M>/rollout-<K>.log    the harness's stdout/stderr tail, when given
        trajectories/step-<N>/task-<M>/rollout-<K>/verifier/   a Harbor task's /logs/verifier files (ctrf.json,
                                                           test-stdout.txt, ...; capped: `archive.verifier_files`)
        metrics.jsonl                                      one line per completed step: {"step", "time", ...}
        timeline.jsonl                                     one line per step, written just before its metrics
                                                           line: where its wall time went (`trainer.timeline`)
        eval.json                                          an eval archive's results (`veri eval`; loop/evals/run.py)
        job.json                                           the job's status (running / finished / failed /
                                                           stopped), start and end, model, max_steps, config
        logs/train.log                                     the trainer's log, one JSON line per message
        logs/libraries.log                                 what transformers, TRL, ... print (`veri train`)
        index.sqlite                                       the console's index (rebuildable from the files)
        tensorboard/                                       TensorBoard event files (when tensorboard is installed)
        incomplete/step-<N>[~i]/ , incomplete/*.jsonl         steps set aside on resume (never deleted)
        checkpoints/checkpoint-<N>/                        TRL's output_dir: what a resume starts from
        weights/step-<N>/                                  the weights the policy servers load (a sync's folder)
        outputs/<rollout_id>/                              in-process sandboxes' VERI_OUTPUT_DIR (the launcher
                                                           service writes <its output root>/<job name>/ instead)
        model/                                             the final model: a transformers folder (LoRA merged)

Writes are atomic: a file is written to a temp file in its own folder (name starting with "." and
ending ".tmp", so no reader's pattern matches it), fsynced, then `os.replace`d into place. JSONL lines
are appended with one `write` on an O_APPEND descriptor and fsynced; a reader ignores a last line that
has no newline or does not parse (a crash mid-append), and the writer cuts such a tail off when it opens.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STEP_DIR = re.compile(r"^step-(\d+)$")
TASK_DIR = re.compile(r"^task-(\d+)$")
ROLLOUT_FILE = re.compile(r"^rollout-(\d+)\.json$")
TEMP_SUFFIX = ".tmp"


@dataclass(frozen=True)
class ArchiveLayout:
    """The paths of one job's folder: the archive, and what the trainer keeps beside it."""

    dir: Path

    @property
    def trajectories(self) -> Path:
        return self.dir / "trajectories"

    @property
    def metrics(self) -> Path:
        return self.dir / "metrics.jsonl"

    @property
    def timeline(self) -> Path:
        return self.dir / "timeline.jsonl"

    @property
    def space_reserve(self) -> Path:
        """Room kept free while the archive is open, for job.json when the volume fills (`archive.volume`)."""
        return self.dir / ".space-reserve"

    @property
    def logs(self) -> Path:
        return self.dir / "logs"

    @property
    def train_log(self) -> Path:
        return self.logs / "train.log"

    @property
    def libraries_log(self) -> Path:
        """Library warnings and logs, kept off the console (infra/quiet.py)."""
        return self.logs / "libraries.log"

    @property
    def index(self) -> Path:
        return self.dir / "index.sqlite"

    @property
    def job_file(self) -> Path:
        """job.json: what the trainer says about the job as a whole (`writer.JobArchive.start_job`)."""
        return self.dir / "job.json"

    @property
    def eval_file(self) -> Path:
        """eval.json: what an eval archive (`veri eval`) evaluated and its figures; a training job has none."""
        return self.dir / "eval.json"

    @property
    def writer_lock(self) -> Path:
        """Held (flock) by the one trainer writing this archive."""
        return self.dir / "writer.lock"

    @property
    def tensorboard(self) -> Path:
        return self.dir / "tensorboard"

    @property
    def incomplete(self) -> Path:
        return self.dir / "incomplete"

    @property
    def checkpoints(self) -> Path:
        return self.dir / "checkpoints"

    @property
    def weights(self) -> Path:
        return self.dir / "weights"

    @property
    def outputs(self) -> Path:
        return self.dir / "outputs"

    @property
    def model(self) -> Path:
        return self.dir / "model"

    def step_dir(self, step: int) -> Path:
        return self.trajectories / f"step-{step}"

    def rollout_path(self, step: int, task_index: int, rollout_index: int) -> Path:
        return self.step_dir(step) / f"task-{task_index}" / f"rollout-{rollout_index}.json"

    def inside(self, relative: str | Path) -> Path:
        """The file at `relative` (an index row's `path`); a path that leads outside the folder is a ValueError."""
        full = (self.dir / relative).resolve()
        if not full.is_relative_to(self.dir.resolve()):
            raise ValueError(f"{relative} is outside the archive {self.dir}")
        return full

    def relative(self, path: Path) -> str:
        """`path` relative to the archive folder, with forward slashes (what the index stores)."""
        return path.relative_to(self.dir).as_posix()

    def steps_on_disk(self) -> list[int]:
        """Steps that have a trajectories/step-<N> folder, ascending."""
        if not self.trajectories.is_dir():
            return []
        found = (STEP_DIR.match(entry.name) for entry in self.trajectories.iterdir() if entry.is_dir())
        return sorted(int(match.group(1)) for match in found if match)

    def rollout_files(self) -> Iterator[tuple[int, Path]]:
        """(step, path) of every rollout-<K>.json under trajectories/, in step, task, rollout order."""
        for step in self.steps_on_disk():
            tasks = [(TASK_DIR.match(d.name), d) for d in self.step_dir(step).iterdir() if d.is_dir()]
            for _, task in sorted((int(m.group(1)), d) for m, d in tasks if m):
                files = [(ROLLOUT_FILE.match(f.name), f) for f in task.iterdir() if f.is_file()]
                for _, path in sorted((int(m.group(1)), f) for m, f in files if m):
                    yield step, path

    def stale_temp_files(self) -> Iterator[Path]:
        """Temp files a crashed writer left behind (safe to remove when no writer is running)."""
        for folder in (self.dir, self.logs):
            if folder.is_dir():
                yield from (p for p in folder.iterdir() if _is_temp(p))
        if self.trajectories.is_dir():
            yield from (p for p in self.trajectories.rglob(f"*{TEMP_SUFFIX}") if _is_temp(p))


def _is_temp(path: Path) -> bool:
    return path.is_file() and path.name.startswith(".") and path.name.endswith(TEMP_SUFFIX)


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` so a reader sees the old file or the whole new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(folder: Path) -> None:
    """Make a rename in `folder` durable (a no-op where directories cannot be opened, e.g. Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def append_line(path: Path, line: str) -> None:
    """Append one line (a newline is added) with a single write, then fsync."""
    data = (line.rstrip("\n") + "\n").encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)


def cut_partial_tail(path: Path) -> bytes:
    """Remove a last line that has no newline (a crash mid-append); returns what was cut (b'' if none)."""
    if not path.is_file():
        return b""
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return b""
    keep = data.rfind(b"\n") + 1
    with open(path, "r+b") as handle:
        handle.truncate(keep)
        handle.flush()
        os.fsync(handle.fileno())
    return data[keep:]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file; a last line without newline, and any unparsable line, are skipped."""
    if not path.is_file():
        return []
    data = path.read_bytes()
    lines = data.split(b"\n")
    lines = lines[:-1]  # the part after the last newline: '' or a line still being (or never fully) written
    items = []
    for line in lines:
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict):
            items.append(item)
    return items


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Per-step metrics lines of a metrics.jsonl (or an archive folder), ascending by step, one per step.

    Lines without an integer "step" are skipped; were a step ever written twice, the later line wins.
    """
    path = Path(path)
    if path.is_dir():
        path = ArchiveLayout(path).metrics
    by_step: dict[int, dict[str, Any]] = {}
    for item in read_jsonl(path):
        step = item.get("step")
        if isinstance(step, int) and not isinstance(step, bool):
            by_step[step] = item
    return [by_step[step] for step in sorted(by_step)]
