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
