"""`veri eval` answers bad input before the heavy libraries load: the eval path (its CLI, checks and run)
imports neither torch nor TRL nor transformers (it samples through the stack and scores with the reward
functions; the trainer's imports took ~7 s of every refusal)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.needs("process")

HEAVY = ("torch", "trl", "transformers", "peft")


def test_the_eval_path_loads_no_training_library():
    code = ("import sys, veri.loop.evals.cli, veri.loop.evals.job_checks, veri.loop.evals.run\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_log_lines_go_to_stderr_so_stdout_is_the_report():
    """`veri eval --json`: a launcher's log line (structlog, unconfigured, prints on stdout) must not come
    before the JSON object."""
    code = ("import structlog, veri.loop.evals.cli as cli\n"
            "cli.log_to_stderr()\n"
            "structlog.get_logger('veri.services.launcher.docker').info('a note of the docker backend')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and "a note of the docker backend" in done.stderr
