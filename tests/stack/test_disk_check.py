"""scripts/disk-check.sh (first in make test / make images): says what is free against what is left to
build, and stops early, naming the way out, when the disk is nearly full."""

from __future__ import annotations

import os
import subprocess

from tests.stack.conftest import REPO


def disk_check(**env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(REPO / "scripts/disk-check.sh")], cwd=REPO, capture_output=True, text=True,
                          timeout=60, env={**os.environ, **env})


def test_reports_free_space_and_the_need():
    done = disk_check(VERI_DISK_MIN_GB="0")
    assert done.returncode == 0, done.stderr
    assert " GB free" in done.stdout and "what is left to build needs about" in done.stdout


def test_stops_below_the_minimum_and_names_the_fix():
    done = disk_check(VERI_DISK_MIN_GB="100000")
    assert done.returncode == 1
    stop = done.stderr.strip().splitlines()[-1]
    assert stop.startswith("disk-check: under 100000 GB free: stopping")
    assert "docker image prune -f" in stop and "VERI_DISK_MIN_GB=0" in stop
