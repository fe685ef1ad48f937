"""Stop signals in `veri train` (`veri.services.trainer.ui.interrupt`), in a fresh interpreter each (the handlers
are process-wide): the first SIGINT / SIGTERM cancels the running step so its clean-up runs to the
end, a second one does not cut that clean-up short, then KeyboardInterrupt."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.needs("process")

STEP = '''
import asyncio, os, signal, sys
from veri.services.trainer.ui.interrupt import install_stop_handlers, run_until_stopped

install_stop_handlers()

async def step():
    try:
        os.kill(os.getpid(), signal.{first})  # lands while the step's sandboxes run
        await asyncio.sleep(60)
    finally:
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C again, mid clean-up
        await asyncio.sleep(0.3)
        print("cleaned up", flush=True)

try:
    run_until_stopped(step())
except KeyboardInterrupt:
    print("stopped", flush=True)
    sys.exit(130)
'''

BETWEEN_STEPS = '''
import os, signal, time
from veri.services.trainer.ui.interrupt import install_stop_handlers

install_stop_handlers()
try:
    os.kill(os.getpid(), signal.SIGTERM)  # as `docker stop` sends it, during an optimizer step
    time.sleep(60)
except KeyboardInterrupt:
    print("stopped", flush=True)
'''


def run(script: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("first", ["SIGINT", "SIGTERM"])
def test_a_stop_signal_cancels_the_step_and_its_clean_up_runs_to_the_end(first):
    done = run(STEP.replace("{first}", first))
    assert done.returncode == 130, done.stderr
    assert done.stdout.split() == ["cleaned", "up", "stopped"]
    assert "SIGINT again - still stopping" in done.stderr and "Traceback" not in done.stderr


def test_sigterm_outside_a_step_is_a_keyboard_interrupt():
    done = run(BETWEEN_STEPS)
    assert done.returncode == 0 and done.stdout.strip() == "stopped", done.stderr
