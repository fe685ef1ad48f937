"""`make down` / `make logs` with the default (relative) state folder: compose must get absolute paths,
else it reads `build/state` as a volume name and refuses the whole file."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("target", ["down", "logs"])
def test_default_paths_are_accepted(target: str):
    env = {k: v for k, v in os.environ.items() if k not in ("VERI_STATE_DIR", "VERI_MODELS_DIR")}
    env["VERI_PROJECT"] = f"veri-test-paths-{os.getpid()}"  # nothing of it runs: compose only parses the file
    done = subprocess.run(["make", "--no-print-directory", target], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "no declaration was found" not in done.stderr
