"""`veri validate` on a Harbor dataset names, before any rollout, each task whose FROM cannot be had offline
(not on this machine, not mapped by the job's `image_map:` to an image that is), with the fix; and, on the
kubernetes backend, notes what its nodes need. The daemon's image list is the outside world here: a set of
names stands in for it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.core.jobs import job, write_job
from veri.validation import harbor_checks
from veri.validation.run import check_config

DEMO = Path(__file__).resolve().parents[2] / "config/data/harbor_cpu/train"


@pytest.fixture
def tasks(tmp_path: Path) -> Path:
    for name in ("copy-apple-to-violet", "count-errors-0"):
        shutil.copytree(DEMO / name, tmp_path / "tasks" / name)
    return tmp_path / "tasks"


def daemon_with(*images: str):
    return lambda: (lambda name: name in images)


def validate(job_dir: Path, tasks: Path, monkeypatch, images: tuple[str, ...], **overrides):
    monkeypatch.setattr(harbor_checks, "docker_has_image", daemon_with(*images))
    return check_config(write_job(job_dir, job(dataset={"harbor": str(tasks)}, **overrides)), base_dir=job_dir)


def test_an_unmapped_from_is_named_per_task_with_the_fix(job_dir: Path, tasks: Path, monkeypatch):
    report = validate(job_dir, tasks, monkeypatch, images=("veri/os-base",))
    assert [p.where for p in report.problems] == [
        "dataset.harbor: copy-apple-to-violet", "dataset.harbor: count-errors-0"]
    assert "FROM python:3.11-slim is not on this machine and not mapped" in report.problems[0].message
    assert report.problems[0].fix.startswith("add `image_map: {python:3.11-slim: veri/task-os-base}` to the job")


def test_a_mapped_from_passes_and_a_map_to_a_missing_image_is_named(job_dir: Path, tasks: Path, monkeypatch):
    mapped = {"image_map": {"python:3.11-slim": "veri/task-os-base"}}
    # veri/task-os-base is had when veri/os-base is: `veri tasks build` makes it
    assert validate(job_dir, tasks, monkeypatch, images=("veri/os-base",), **mapped).problems == []
    report = validate(job_dir, tasks, monkeypatch, images=(), **mapped)
    assert "FROM python:3.11-slim is mapped to veri/task-os-base, which is not on this machine" in \
        report.problems[0].message
    assert validate(job_dir, tasks, monkeypatch, images=("python:3.11-slim",)).problems == []  # a local FROM


def test_the_kubernetes_backend_runs_them_and_a_note_says_what_the_nodes_need(job_dir: Path, tasks: Path,
                                                                              monkeypatch):
    monkeypatch.setenv("VERI_LAUNCHER_BACKEND", "kubernetes")
    report = validate(job_dir, tasks, monkeypatch, images=("python:3.11-slim",))
    assert report.problems == []
    assert any("the launcher is kubernetes" in note and "--registry" in note for note in report.notes), report.notes
    monkeypatch.delenv("VERI_LAUNCHER_BACKEND")
    assert not any("kubernetes" in note for note in validate(job_dir, tasks, monkeypatch,
                                                             images=("python:3.11-slim",)).notes)


def test_without_a_daemon_the_images_are_a_note(job_dir: Path, tasks: Path, monkeypatch):
    monkeypatch.setattr(harbor_checks, "docker_has_image", lambda: None)
    report = check_config(write_job(job_dir, job(dataset={"harbor": str(tasks)})), base_dir=job_dir)
    assert report.problems == [] and any("FROM images were not checked" in note for note in report.notes)
