"""The dev-only local backend, cancelled (the trainer stops): the harness runs in its own session, so
no Ctrl-C reaches it; the backend kills its whole process group before the cancel returns."""

from __future__ import annotations

import asyncio

import pytest

from tests.launcher.test_local_backend import bundle, launch
from tests.waiting import alive, until, wait_for
from veri.core.launch import GroupLaunch
from veri.services.launcher.group import run_group
from veri.services.launcher.local import LocalBackend

pytestmark = pytest.mark.needs("process")


def test_a_cancelled_group_kills_its_harnesses(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    sleeper = bundle(tmp_path, "sleeper", f"""
import os, pathlib, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
pathlib.Path({str(pids)!r}, os.environ["VERI_ROLLOUT_ID"]).write_text(f"{{os.getpid()}} {{child.pid}}")
time.sleep(600)
""")
    group = GroupLaunch(max_parallel=2, launches=[launch(sleeper, f"r-{i}", timeout_s=600) for i in range(2)])

    async def scenario() -> None:
        task = asyncio.create_task(run_group(LocalBackend(), group, tmp_path / "out"))
        await until(lambda: len(list(pids.iterdir())) == 2, "both harnesses to start", timeout_s=30)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass

    asyncio.run(scenario())
    started = [int(pid) for path in pids.iterdir() for pid in path.read_text().split()]
    assert len(started) == 4
    # Killed (SIGKILL, whole group) before the cancel returned: their ends are the kernel's milliseconds.
    wait_for(lambda: not [pid for pid in started if alive(pid)], "the killed harnesses and their children to end",
             timeout_s=2)
