"""dockerd stopped for a few seconds mid-step (service_faults' dockerd step), and what it must not break.

With live-restore (`make docker` sets it) every container keeps running while dockerd is away: the
proxy, the running sandboxes. What is checked while it is down, besides the job itself:
  - a probe sandbox (runsc, on the rollouts network, the proxy pinned in its /etc/hosts as the
    launcher pins it) keeps getting answers from the proxy, and ends (exit 7) while dockerd is down;
    its exit code is read once dockerd is back;
  - the proxy answers on its bridge network from the host;
  - its port published on 127.0.0.1: docker-proxy, which carries it, dies with dockerd (recorded; the
    job does not use it) and must answer again once dockerd is back.
dockerd is stopped with SIGTERM (no systemd here) and started again by scripts/docker/setup.sh.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[3]
SETUP = ROOT / "scripts" / "docker" / "setup.sh"
DOCKERD_PID = Path("/var/run/docker.pid")
PROBE_EXIT = 7
# Polls the proxy's /health by name until the scenario writes the time to stop into /probe/stop_at,
# one line per answer (wall clock: gVisor's is the host's).
PROBE = """
import pathlib, sys, time, urllib.request
out = pathlib.Path("/probe")
url = sys.argv[1]
while True:
    stop_at = out / "stop_at"
    if stop_at.is_file() and time.time() >= float(stop_at.read_text() or "inf"):
        sys.exit(7)
    try:
        urllib.request.urlopen(url, timeout=2).read()
        with open(out / "answers", "a") as f:
            f.write(f"{time.time()}\\n")
    except Exception as error:
        with open(out / "errors", "a") as f:
            f.write(f"{time.time()} {type(error).__name__}: {error}\\n")
    time.sleep(0.5)
"""


@dataclass
class Outage:
    stopped_at: float = 0.0  # wall clock: SIGTERM sent
    back_at: float = 0.0  # dockerd answering again
    probe_answers: int = 0  # the probe sandbox's answers from the proxy while dockerd was down
    probe_exit: int | None = None  # read after dockerd was back
    proxy_health: bool = False  # the proxy answered the host on its bridge network meanwhile
    published_down: str = ""  # what its 127.0.0.1 port did meanwhile
    published_back_s: float | None = None  # after dockerd answered again
    problems: list[str] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return self.back_at - self.stopped_at


def unstoppable(docker_client: Any) -> str | None:
    """Why dockerd cannot be stopped here without harm, or None."""
    if os.geteuid() != 0:
        return "stopping dockerd needs root"
    if not docker_client.info().get("LiveRestoreEnabled"):
        return "dockerd runs without live-restore (stopping it would stop every container): run `make docker`"
    if not DOCKERD_PID.is_file():
        return f"no {DOCKERD_PID}"
    return None


def stop_dockerd(docker_client: Any, *, network: str, image: str, proxy_url: str, proxy_host: str,
                 published_url: str, workdir: Path, outage_s: float = 8.0) -> Outage:
    """Stop dockerd for about `outage_s` seconds (SIGTERM until setup.sh has it answering again)."""
    from veri.services.launcher.docker_hosts import PinnedHosts

    outage = Outage()
    folder = workdir / f"probe-{uuid.uuid4().hex[:6]}"
    folder.mkdir(parents=True)
    folder.chmod(0o777)
    health = f"http://{proxy_host}:8000/health"
    probe = docker_client.containers.run(
        image, ["python", "-c", PROBE, health], detach=True, runtime="runsc", network=network,
        user="1000:1000", extra_hosts=PinnedHosts(docker_client).for_sandbox(network, {"url": health}) or None,
        volumes={str(folder): {"bind": "/probe", "mode": "rw"}}, labels={"org.veri.test.service-faults": "1"},
        name=f"veri-rel-dockerd-probe-{uuid.uuid4().hex[:6]}")
    try:
        _wait_for(lambda: (folder / "answers").is_file(), 120, f"the probe sandbox got no answer: {_errors(folder)}")
        pid = int(DOCKERD_PID.read_text())
        dockerd = psutil.Process(pid)
        outage.stopped_at = time.time()
        os.kill(pid, signal.SIGTERM)
        dockerd.wait(timeout=60)
        (folder / "stop_at").write_text(str(time.time() + outage_s / 2))  # the probe ends while dockerd is down
        outage.proxy_health = _answers(f"{proxy_url}/health")
        outage.published_down = "answered" if _answers(f"{published_url}/health") else "refused"
        time.sleep(max(0.0, outage.stopped_at + outage_s - time.time()))
        down_until = time.time()
        started = subprocess.run([str(SETUP)], capture_output=True, text=True, timeout=180)
        if started.returncode != 0:
            raise RuntimeError(f"scripts/docker/setup.sh could not start dockerd again: {started.stderr[-1500:]}")
        _wait_for(lambda: _pings(docker_client), 60, "dockerd does not answer after setup.sh")
        outage.back_at = time.time()
        outage.probe_exit = int(probe.wait(timeout=60)["StatusCode"])
        answers = [float(t) for t in (folder / "answers").read_text().split()]
        outage.probe_answers = sum(outage.stopped_at + 1 < t < down_until for t in answers)
        deadline = time.monotonic() + 30
        while not _answers(f"{published_url}/health") and time.monotonic() < deadline:
            time.sleep(0.2)
        if _answers(f"{published_url}/health"):
            outage.published_back_s = time.time() - outage.back_at
    finally:
        _wait_for(lambda: _pings(docker_client), 180, "dockerd does not answer")
        with contextlib.suppress(Exception):  # docker.errors.NotFound: gone already
            probe.remove(force=True)
    if outage.probe_exit != PROBE_EXIT:
        outage.problems.append(f"the probe sandbox's exit code read after dockerd was back: {outage.probe_exit},"
                               f" not {PROBE_EXIT}")
    if not outage.probe_answers:
        outage.problems.append("the proxy answered the probe sandbox nothing while dockerd was down: "
                               + _errors(folder))
    if not outage.proxy_health:
        outage.problems.append("the proxy did not answer on its bridge network while dockerd was down")
    if outage.published_back_s is None:
        outage.problems.append(f"the proxy's published port {published_url} did not answer 30 s after dockerd was back")
    return outage


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=3).status_code == 200
    except httpx.HTTPError:
        return False


def _pings(docker_client: Any) -> bool:
    try:
        return bool(docker_client.ping())
    except Exception:  # noqa: BLE001 - requests' ConnectionError, docker's APIError: not back yet
        return False


def _wait_for(ready: Any, timeout: float, failure: str) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(failure)
        time.sleep(0.3)


def _errors(folder: Path) -> str:
    errors = folder / "errors"
    return errors.read_text()[-600:] if errors.is_file() else "no errors recorded"
