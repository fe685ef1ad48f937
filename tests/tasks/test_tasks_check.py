"""`veri tasks check PATH...`: one line per task (ok, or its problems with their fixes), warnings for what veri
ignores and for the test.sh lines the offline verifier cannot serve, exit 1 on any problem."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from veri.cli import main

FIXTURES = Path(__file__).resolve().parents[2] / "tests/fixtures/harbor"


def test_runnable_tasks_are_ok_and_exit_zero(capsys: pytest.CaptureFixture[str]):
    assert main(["tasks", "check", str(FIXTURES / "harbor"), str(FIXTURES / "veri/reward-txt")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if not line.startswith("  ")] == [
        *(f"{FIXTURES / 'harbor' / name}: ok" for name in
          ("hello-alpine", "hello-healthcheck", "hello-user", "hello-workdir", "hello-world")),
        f"{FIXTURES / 'veri/reward-txt'}: ok",
        "6 tasks: 6 ok, 0 with problems",
    ]
    # Alpine's apk cannot be served offline: named before any rollout, as a warning
    assert any(line.startswith("  warning: hello-alpine: tests/test.sh line 4: `apk add`") for line in out)


def test_every_problem_of_every_task_is_printed_and_the_exit_is_one(capsys: pytest.CaptureFixture[str]):
    assert main(["tasks", "check", str(FIXTURES / "harbor-cookbook"), str(FIXTURES / "veri")]) == 1
    out = capsys.readouterr().out
    assert f"{FIXTURES / 'harbor-cookbook/mcp-tools'}: 2 problems\n" in out
    assert "  problem: multi-step: steps: is a multi-step task" in out
    assert f"{FIXTURES / 'veri/refused'}: 7 problems\n" in out
    assert "    fix: set gpus = 0\n" in out
    assert "  warning: skills: environment.skills_dir is ignored" in out
    assert out.endswith("10 tasks: 6 ok, 4 with problems\n")


def test_a_path_that_is_no_task_and_a_broken_toml_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    shutil.copytree(FIXTURES / "veri/reward-txt", tmp_path / "broken")
    (tmp_path / "broken/task.toml").write_text("[environment]\ncpus = 'two'\n")
    assert main(["tasks", "check", str(tmp_path / "broken"), str(tmp_path / "missing")]) == 1
    out = capsys.readouterr().out
    assert f"{tmp_path / 'broken'}: 1 problem\n  problem: broken: environment.cpus:" in out
    assert f"{tmp_path / 'missing'}: not a task\n  problem: {tmp_path / 'missing'}: does not exist" in out
