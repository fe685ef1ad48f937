"""`veri eval CONFIG` on its own (no stack flags, no --image): it refuses before anything starts and prints the
exact commands that run this eval: `make eval` with the same options, or by hand with the bundle's image (`veri train`
on its own gets the same, from the same code: rollouts/stack_args.py; tests/trainer/test_train_cli.py)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.needs("process")

REPO = Path(__file__).resolve().parents[2]


def veri_eval(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "veri.cli", "eval", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def test_alone_it_prints_the_commands_that_run_it(tmp_path: Path) -> None:
    done = veri_eval("config/url_extract_tiny.yaml", "--job", "demo", "--held-out", "-n", "2", "--output",
                     str(tmp_path / "jobs"))
    assert done.returncode == 1 and "Traceback" not in done.stderr and done.stdout == ""
    lines = [line.strip() for line in done.stderr.splitlines()]
    assert "make eval CONFIG=config/url_extract_tiny.yaml ARGS='--job demo --held-out --samples 2'" in lines
    assert "veri harness build harness-bundles/url_extract_openai   # prints IMAGE" in lines
    by_hand = next(line for line in lines if line.startswith("veri eval "))
    assert shlex.split(by_hand)[2:] == ["config/url_extract_tiny.yaml", "--job", "demo", "--held-out", "--samples",
                                        "2", "--output", str(tmp_path / "jobs"), "--sandbox", "docker", "--image",
                                        "IMAGE"]
    assert not (tmp_path / "jobs").exists()  # nothing started, nothing written


def test_options_at_their_defaults_are_left_out_and_compare_keeps_both_sides() -> None:
    done = veri_eval("config/url_extract_tiny.yaml", "--compare", "final", "base", "--job", "demo", "-n", "4",
                     "--sandbox", "launcher")
    said = done.stderr
    assert done.returncode == 1
    assert "ARGS='--job demo --compare final base'" in said and "--samples" not in said
    assert "--sandbox launcher --image IMAGE" in said


def test_a_broken_job_is_reported_first(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("model: m\n")
    done = veri_eval(str(job))
    assert done.returncode == 1 and "is required" in done.stderr and "make eval" not in done.stderr
