"""One place for jobs: every command finds a job by the name `make train` gave it, in <state>/jobs, from any
folder (veri.core.state)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.core.jobs import job, make_job_dir, write_job
from tests.export.archive import JOB, write_archive
from veri.cli import main
from veri.core import state

REPO = Path(__file__).resolve().parents[2]


def test_the_default_is_where_make_train_writes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("VERI_STATE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)  # a command run from anywhere: the checkout's folder all the same
    make_default = re.search(r"^VERI_STATE_DIR \?= (\S+)$", (REPO / "mk/stack.mk").read_text(), re.MULTILINE)
    assert make_default, "mk/stack.mk declares VERI_STATE_DIR's default"
    assert state.state_dir() == REPO / make_default.group(1)
    assert state.jobs_dir() == REPO / make_default.group(1) / "jobs"
    monkeypatch.setenv("VERI_STATE_DIR", str(tmp_path / "elsewhere"))
    assert state.jobs_dir() == tmp_path / "elsewhere" / "jobs"


@pytest.fixture
def state_with_a_job(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A state folder holding one job, as make train leaves it; the commands run from another folder."""
    write_archive(tmp_path / "state" / "jobs")
    monkeypatch.setenv("VERI_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.chdir(make_job_dir(tmp_path / "elsewhere"))
    return tmp_path / "state"


def test_export_finds_a_job_by_its_name(state_with_a_job: Path, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "rows.jsonl"
    assert main(["export", "sft", JOB, "--out", str(out)]) == 0, capsys.readouterr().err
    assert out.read_text().strip()


def test_job_status_finds_a_job_by_its_name(state_with_a_job: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["job", "status", JOB, "--field", "last_step"]) == 0, capsys.readouterr().err
    assert capsys.readouterr().out.strip() == "2"


def test_eval_finds_a_job_by_its_name(state_with_a_job: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_job(Path.cwd(), job())
    assert main(["eval", str(config), "--job", JOB, "--sandbox", "local"]) == 1
    said = capsys.readouterr().err
    assert f"job {JOB!r} has no final model" in said, said  # found it: the job has not finished
    assert "no job" not in said
