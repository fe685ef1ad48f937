"""A job's folder on a volume that fills up (a real 2 MB tmpfs): the archive stops the job with a message
naming the folder and the fix (`StateVolumeFull`), job.json says failed with it, every file it wrote is
whole. The same through `veri train` and the launcher: tests/sandbox/test_service_faults.py."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.trainer.records import scored
from veri.archive import JobArchive
from veri.archive.volume import RESERVE_BYTES, filled_up
from veri.services.trainer.errors import StateVolumeFull


@pytest.fixture
def small_volume(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    folder = tmp_path / "volume"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder)], check=True)
    yield folder
    subprocess.run(["umount", "-l", str(folder)], check=True)


def fill(volume: Path) -> None:
    with contextlib.suppress(OSError), open(volume / "filler", "wb", buffering=0) as filler:
        while True:
            filler.write(b"\0" * 4096)


@pytest.mark.needs("process")
def test_a_full_volume_stops_the_job_naming_the_folder(small_volume: Path):
    with pytest.raises(StateVolumeFull) as stopped:
        with JobArchive(small_volume, "job-1") as archive:
            archive.start_job(model="tiny", max_steps=3, config={})
            archive.write_rollout(0, scored(0, 0, 1.0))
            archive.write_step_metrics(0, {"reward": 1.0})
            fill(small_volume)
            archive.write_rollout(1, scored(0, 0, 0.5))  # no room: ENOSPC
    job = small_volume / "job-1"
    message = str(stopped.value)
    assert "no space left on device" in message and str(job) in message and "RESUME=1" in message
    info = json.loads((job / "job.json").read_bytes())
    assert info["status"] == "failed" and info["error"] == message
    assert "stopped: the state volume is full" in (job / "logs" / "train.log").read_text()
    for path in job.rglob("*.json"):
        json.loads(path.read_bytes())  # whole, or not there
    assert not list(job.rglob("*.tmp")) and not (job / ".space-reserve").exists()
    assert [json.loads(line)["step"] for line in (job / "metrics.jsonl").read_text().splitlines()] == [0]


@pytest.mark.needs("process")
def test_a_volume_too_full_to_open_the_archive_is_named_at_once(small_volume: Path):
    (small_volume / "job-1").mkdir()
    fill(small_volume)
    with pytest.raises(StateVolumeFull, match="no space left on device under"):
        JobArchive(small_volume, "job-1")


def test_other_failures_keep_their_own_message(tmp_path: Path):
    with pytest.raises(RuntimeError, match="a bug"), JobArchive(tmp_path, "job-1") as archive:
        archive.start_job(model="tiny", max_steps=1, config={})
        assert (tmp_path / "job-1" / ".space-reserve").stat().st_size == RESERVE_BYTES
        raise RuntimeError("a bug")
    assert json.loads((tmp_path / "job-1" / "job.json").read_bytes())["error"] == "RuntimeError: a bug"
    assert not filled_up(tmp_path, RuntimeError("a bug"))
