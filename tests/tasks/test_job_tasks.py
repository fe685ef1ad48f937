"""`veri train` and `veri eval` resolve a Harbor dataset's tasks once, at their start, through tools/tasks/job.py
(veri/cli.py hands it to the commands, which live below tools/), and the launch settings carry the result as
a plain mapping. A job without Harbor tasks needs nothing; one on the local sandbox or without the bundle's
image is refused with the fix."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.core.jobs import job, make_job_dir, write_job
from veri.cli import build_parser
from veri.loop.collect.errors import StackError
from veri.loop.collect.options import TrainOptions
from veri.loop.collect.stack import launch_settings
from veri.tools.tasks import cli as tasks_cli
from veri.tools.tasks.job import job_harbor_tasks
from veri.validation import harbor_checks
from veri.validation.run import load_config

DEMO = Path(__file__).resolve().parents[2] / "config/data/harbor_cpu/train/copy-apple-to-violet"


@pytest.fixture
def harbor_job(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(harbor_checks, "docker_has_image", lambda: None)  # no daemon asked
    job_dir = make_job_dir(tmp_path)
    shutil.copytree(DEMO, job_dir / "tasks" / DEMO.name)
    return load_config(write_job(job_dir, job(dataset={"harbor": "tasks"})), base_dir=job_dir)


def test_train_and_eval_are_handed_the_resolver():
    parser = build_parser()
    assert parser.parse_args(["train", "job.yaml"]).harbor_tasks is tasks_cli.job_harbor_tasks
    assert parser.parse_args(["eval", "job.yaml"]).harbor_tasks is tasks_cli.job_harbor_tasks


def test_a_job_without_harbor_tasks_needs_nothing(tmp_path: Path):
    job_dir = make_job_dir(tmp_path)
    config = load_config(write_job(job_dir, job()), base_dir=job_dir)
    assert job_harbor_tasks(config, "local", None) == {}


def test_harbor_tasks_are_refused_on_the_local_sandbox_and_without_the_image(harbor_job):
    with pytest.raises(StackError, match="--sandbox docker"):
        job_harbor_tasks(harbor_job, "local", None)
    with pytest.raises(StackError, match="--image"):
        job_harbor_tasks(harbor_job, "docker", None)


def test_the_launch_settings_carry_the_resolved_tasks(harbor_job):
    resolved = {str(DEMO): {"image": "veri/task-x:1", "runtime_tree": "/rt", "tools_dir": None,
                            "harness_command": ["/veri/rt/bin/python3", "/veri/rt/harness/agent.py"]}}
    options = TrainOptions(proxy_url="http://p", policy_urls=[], output_root=Path("/tmp"), job_name="j",
                           sandbox="docker", image="veri/harness-x:1", harbor_tasks=resolved)
    assert launch_settings(harbor_job, options).harbor_tasks == resolved


def test_a_jobs_start_prints_what_it_built_and_counts_what_was_built_before(capsys):
    from veri.tools.tasks.job import _BuildLines

    lines = _BuildLines()
    for line in ("tasks build: veri/task-a:1 is up to date", "tasks build: veri/task-b:2 built (0 answers)",
                 "tasks build: veri/task-c:3 is up to date"):
        lines(line)
    lines.summary(3)
    assert capsys.readouterr().err.splitlines() == [
        "tasks build: veri/task-b:2 built (0 answers)",
        "tasks: 3 Harbor tasks ready (2 images already built, the rest built above)"]
