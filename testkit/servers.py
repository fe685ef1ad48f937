"""Start `veri serve ...` as a real subprocess on a free loopback port and wait until healthy."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx


@dataclass
class RunningServer:
    url: str
    port: int
    process: subprocess.Popen
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def start_server(
    args: list[str],
    *,
    port: int | None = None,
    env: dict[str, str] | None = None,
    health_path: str = "/health",
    timeout_s: float = 120.0,
) -> Iterator[RunningServer]:
    port = port or free_port()
    log_dir = Path(os.environ.get("VERI_TEST_LOGS", "/tmp/veri-test-logs"))
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{args[1] if len(args) > 1 else args[0]}-{port}.log"
    cmd = [sys.executable, "-m", "veri.cli", *args, "--host", "127.0.0.1", "--port", str(port)]
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    server = RunningServer(url=f"http://127.0.0.1:{port}", port=port, process=process, log_path=log_path)
    try:
        _wait_healthy(server, health_path, timeout_s)
        yield server
    finally:
        stop_server(server)


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the child before exec: when pytest itself is killed (a `timeout` on CI, kill -9), the
    kernel sends the server SIGTERM, so no orphaned `veri serve` keeps its port and CPU."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def stop_server(server: RunningServer) -> None:
    if server.process.poll() is None:
        os.killpg(server.process.pid, signal.SIGTERM)
        try:
            server.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.process.pid, signal.SIGKILL)
            server.process.wait()


def _wait_healthy(server: RunningServer, health_path: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"server exited with {server.process.returncode}:\n{server.log()[-4000:]}")
        try:
            if httpx.get(server.url + health_path, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"server not healthy after {timeout_s}s:\n{server.log()[-4000:]}")
