"""The docker backend while dockerd does not answer, without stopping the shared dockerd: the backend
talks to dockerd through a relay socket that can go away as a stopped dockerd does (new connections
refused, open ones cut, the long `wait` on a running sandbox among them) and come back. Real runsc
sandboxes. Stopping the real dockerd (live-restore, the proxy answering meanwhile) is the dockerd step
of bench/reliability/scenarios/service_faults.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from tests.sandbox.conftest import BASE, LABEL, SESSION
from tests.waiting import until
from veri.core.launch import RolloutLaunch

DOCKER_SOCKET = "/var/run/docker.sock"


class DockerdRelay:
    """A unix socket forwarding to dockerd's; `away()` makes it look stopped until `back()`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None

    def back(self) -> None:
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(str(self.path))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def away(self) -> None:
        assert self._listener is not None
        listener, self._listener = self._listener, None
        listener.close()
        self.path.unlink()
        with self._lock:
            for conn in self._conns:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                conn.close()
            self._conns.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed: away
            upstream = socket.socket(socket.AF_UNIX)
            upstream.connect(DOCKER_SOCKET)
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[DockerdRelay]:
    relay = DockerdRelay(Path(f"/tmp/veri-relay-{uuid.uuid4().hex[:8]}.sock"))
    relay.back()
    yield relay
    if relay._listener is not None:
        relay.away()


def relayed_backend(relay: DockerdRelay, network: str, launcher_id: str, grace_s: float):
    from veri.services.launcher.docker_backend import DockerBackend

    client = docker.DockerClient(base_url=f"unix://{relay.path}", timeout=120)
    return DockerBackend(network=network, client=client, launcher_id=launcher_id, max_sandboxes=4,
                         host_paths={}, dockerd_grace_s=grace_s)


def resolve_launch(image: str, rollout_id: str, model_server: str, **task) -> RolloutLaunch:
    env = {"VERI_ROLLOUT_ID": rollout_id, "VERI_TASK": json.dumps({"fault": "resolve", **task}),
           "OPENAI_BASE_URL": f"http://{model_server}:8000/v1"}
    return RolloutLaunch(rollout_id=rollout_id, image=image, env=env, timeout_s=120, labels={"job": "dockerd-away"})


@pytest.fixture
def model_server(docker_client, rollouts_network) -> Iterator[tuple[str, str]]:
    """A named container on the rollouts network (the proxy's place): (name, its address there)."""
    name = f"veri-test-model-{uuid.uuid4().hex[:6]}"
    container = docker_client.containers.run(BASE, ["sleep", "600"], name=name, detach=True,
                                             network=rollouts_network, labels={LABEL: SESSION})
    container.reload()
    try:
        yield name, container.attrs["NetworkSettings"]["Networks"][rollouts_network]["IPAddress"]
    finally:
        container.remove(force=True)


def leftovers(docker_client, launcher_id: str) -> list:
    return docker_client.containers.list(all=True, filters={"label": f"veri.launcher={launcher_id}"})


def test_rollouts_ride_through_dockerd_going_away(relay, docker_client, rollouts_network, harness_image,
                                                   model_server, tmp_path):
    """One sandbox running when dockerd goes away (its wait is cut, it exits 3 meanwhile), one launched
    while it is away (its create waits): both end with their own exit codes once it is back, and each
    resolved the model server through its pinned /etc/hosts, not docker's DNS."""
    name, address = model_server
    launcher_id = f"test-away-{uuid.uuid4().hex[:6]}"
    backend = relayed_backend(relay, rollouts_network, launcher_id, grace_s=60)

    async def scenario():
        running = asyncio.ensure_future(backend.run(
            resolve_launch(harness_image, "r-running", name, sleep_s=3, code=3), tmp_path / "r-running"))
        deadline = time.monotonic() + 120
        while not docker_client.containers.list(filters={"label": "veri.rollout_id=r-running"}):
            assert time.monotonic() < deadline and not running.done(), "the first sandbox never started"
            await asyncio.sleep(0.2)
        relay.away()
        later = asyncio.ensure_future(backend.run(
            resolve_launch(harness_image, "r-later", name), tmp_path / "r-later"))
        # docker's own client (not the relay) sees the first sandbox end while the backend cannot.
        await until(lambda: docker_client.containers.list(
            all=True, filters={"label": "veri.rollout_id=r-running", "status": "exited"}),
            "the first sandbox to end while dockerd is away", timeout_s=120, every_s=0.2)
        assert not running.done() and not later.done(), "a rollout ended while dockerd was away"
        relay.back()
        return await asyncio.gather(running, later)

    try:
        first, second = asyncio.run(scenario())
    finally:
        backend.close()
    assert (first.status, first.exit_code, first.infrastructure_error) == ("failed", 3, None)
    assert (second.status, second.exit_code) == ("completed", 0), second
    for rollout in ("r-running", "r-later"):  # pinned: docker's DNS is down with a stopped dockerd
        assert (tmp_path / rollout / "resolved.txt").read_text() == address
        assert f"{address}\t{name}" in (tmp_path / rollout / "hosts.txt").read_text().splitlines()
    assert leftovers(docker_client, launcher_id) == []


def test_dockerd_away_past_the_grace_ends_the_rollout_as_infrastructure(relay, docker_client, rollouts_network,
                                                                          harness_image, model_server, tmp_path):
    """Away longer than the backend waits: the rollout ends failed with an infrastructure_error that
    says so (masked by the trainer, never scored); its sandbox is removed once dockerd answers again."""
    name, _ = model_server
    launcher_id = f"test-away-{uuid.uuid4().hex[:6]}"
    backend = relayed_backend(relay, rollouts_network, launcher_id, grace_s=3)

    async def scenario():
        running = asyncio.ensure_future(backend.run(
            resolve_launch(harness_image, "r-stranded", name, sleep_s=30), tmp_path / "r-stranded"))
        deadline = time.monotonic() + 120
        while not docker_client.containers.list(filters={"label": "veri.rollout_id=r-stranded"}):
            assert time.monotonic() < deadline and not running.done(), "the sandbox never started"
            await asyncio.sleep(0.2)
        relay.away()
        result = await asyncio.wait_for(running, timeout=60)
        relay.back()
        after = await backend.run(resolve_launch(harness_image, "r-after", name), tmp_path / "r-after")
        return result, after

    try:
        stranded, after = asyncio.run(scenario())
    finally:
        backend.close()
    assert stranded.status == "failed" and stranded.exit_code is None
    assert "dockerd did not answer for 3 s" in (stranded.infrastructure_error or "")
    assert after.status == "completed"  # the next rollout removed the stranded sandbox first
    assert leftovers(docker_client, launcher_id) == []


def test_the_wrapper_records_the_harness_exit_status(tmp_path):
    """What stands in for docker's status when it comes back from live-restore as 255 (lost)."""
    import subprocess

    from veri.services.launcher.docker_backend import LOGS_MOUNT, STDIO_WRAPPER
    from veri.services.launcher.sandbox_files import recorded_exit

    logs = tmp_path / "logs"
    logs.mkdir()
    wrapper = STDIO_WRAPPER.replace(LOGS_MOUNT, str(logs))
    done = subprocess.run(["sh", "-c", wrapper, "veri-harness", "sh", "-c", "echo hi; echo oops >&2; exit 3"])
    assert done.returncode == 3 and recorded_exit(logs) == 3
    assert (logs / "stdout").read_text() == "hi\n" and (logs / "stderr").read_text() == "oops\n"
    (logs / "exit").write_text("not a status")
    assert recorded_exit(logs) is None
