"""The console under gunicorn (`veri serve console`, as the stack runs it): its worker killed with -9 in
the middle of a live log stream is replaced by the master, which kept the port; the page's next
request is served, and an EventSource that reconnects with its Last-Event-ID gets the lines written
meanwhile, none twice. (The whole service killed is service_faults' console step.)"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from testkit.console_archive import write_job
from testkit.servers import start_server

pytestmark = pytest.mark.needs("process")


def _workers(master: psutil.Process) -> set[int]:
    return {child.pid for child in master.children()}


def _first_event(lines: Iterator[str]) -> tuple[str, list[str]]:
    """(id, data lines) of the stream's next event."""
    event_id, data = "", []
    for line in lines:
        if line.startswith("id: "):
            event_id = line[4:]
        elif line.startswith("data: "):
            data.append(line[6:])
        elif not line and data:
            return event_id, data
    raise AssertionError("the stream ended before its first event")


def test_a_console_worker_killed_mid_stream_is_replaced(tmp_path: Path, tiny_model: Path) -> None:
    with write_job(tmp_path / "jobs", "live", tiny_model) as archive, \
            start_server(["serve", "console", "--state", str(tmp_path)]) as console:
        master = psutil.Process(console.process.pid)
        [victim] = _workers(master)
        with httpx.stream("GET", f"{console.url}/jobs/live/logs/stream", timeout=30) as stream:
            assert stream.status_code == 200
            events = stream.iter_lines()
            last_id, lines = _first_event(events)  # the job runs: the stream stays open after the tail
            assert any("job live" in line for line in lines), lines
            os.kill(victim, signal.SIGKILL)
            archive.log("a line written while the worker was gone")
            try:
                for _ in events:  # the dead worker's connection ends, cut or closed
                    pass
            except httpx.HTTPError:
                pass
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (_workers(master) - {victim}):
            time.sleep(0.2)
        assert _workers(master) - {victim}, "gunicorn did not start a new worker"
        assert master.is_running()
        listed = httpx.get(f"{console.url}/api/jobs", timeout=30).raise_for_status().json()
        assert [job["name"] for job in listed] == ["live"] and listed[0]["status"] == "running"
        with httpx.stream("GET", f"{console.url}/jobs/live/logs/stream", headers={"Last-Event-ID": last_id},
                          timeout=30) as resumed:
            _, after = _first_event(resumed.iter_lines())
        assert after == [line for line in after if "a line written while the worker was gone" in line], after
        assert len(after) == 1
