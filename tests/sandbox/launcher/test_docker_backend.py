"""The docker (gVisor) backend against a real dockerd + runsc: every fault in one group, each with its
status and no effect on the rest; isolation seen from inside a running sandbox; leftovers."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import uuid
from pathlib import Path

import psutil

from tests.sandbox.conftest import BASE, LABEL, SESSION
from veri.core.launch import GroupLaunch, RolloutLaunch, SandboxLimits
from veri.services.launcher.group import run_group


def launch(image: str, rollout_id: str, task: dict, **kw) -> RolloutLaunch:
    env = {"VERI_ROLLOUT_ID": rollout_id, "VERI_TASK": json.dumps(task), "OPENAI_API_KEY": f"key-{rollout_id}"}
    return RolloutLaunch(rollout_id=rollout_id, image=image, env=env, timeout_s=kw.pop("timeout_s", 60),
                         labels={"job": "sandbox-test"}, **kw)


def test_faults_in_one_group(backend, harness_image, docker_client, launcher_id, tmp_path):
    image = harness_image
    small = SandboxLimits(tmpfs_mb=64, output_max_bytes=1 << 20)
    group = GroupLaunch(max_parallel=10, launches=[
        launch(image, "ok-1", {"fault": "ok", "n": 1}),
        launch(image, "exit", {"fault": "exit"}),
        launch(image, "silent", {"fault": "silent"}),
        launch(image, "hang", {"fault": "hang", "grandchild_delay": 6}, timeout_s=4),
        launch(image, "forkbomb", {"fault": "forkbomb"}, limits=SandboxLimits(nproc=64)),
        launch(image, "memhog", {"fault": "memhog"}, limits=SandboxLimits(memory_mb=256)),
        launch(image, "loud", {"fault": "loud"}),
        launch(image, "bigout", {"fault": "bigout"}, limits=small),
        launch(image, "nocall", {"fault": "nocall"}),
        launch(image, "ok-2", {"fault": "ok", "n": 21}),
    ])
    results = {r.rollout_id: r for r in asyncio.run(run_group(backend, group, tmp_path / "out"))}
    summary = {k: (r.status, r.exit_code, r.infrastructure_error, r.stderr_tail[-300:]) for k, r in results.items()}

    # The ok rollouts of the same group ran normally.
    for rollout_id, answer in (("ok-1", "2"), ("ok-2", "42")):
        result = results[rollout_id]
        assert result.status == "completed" and result.exit_code == 0, summary
        assert result.stdout_tail == f"ok {rollout_id}\n" and result.stderr_tail == ""
        assert (Path(result.output_dir) / "answer.txt").read_text() == answer
        assert not result.output_truncated and result.infrastructure_error is None

    assert results["exit"].status == "failed" and results["exit"].exit_code == 3, summary
    assert results["exit"].stderr_tail == "boom\n"
    # exit 1 and nothing on stderr: how a MemoryError too big to print ends under gVisor, so said
    silent = results["silent"]
    assert silent.status == "failed" and silent.exit_code == 1, summary
    assert silent.stderr_tail.startswith("[veri] exit 1 with nothing on stderr"), silent.stderr_tail
    assert "memory limit was 2048 MB" in silent.stderr_tail

    hang = results["hang"]
    assert hang.status == "truncated" and hang.exit_code is None, summary
    assert "hanging" in hang.stdout_tail and "timeout_s=4" in hang.stderr_tail
    assert hang.duration_s >= 4  # it ran until its timeout (how much longer is the machine's business)

    assert results["forkbomb"].status == "completed", summary
    assert "survived" in results["forkbomb"].stdout_tail

    memhog = results["memhog"]
    assert memhog.status == "failed" and memhog.exit_code in (1, 137), summary
    assert "not killed" not in memhog.stdout_tail and "300 MB" not in memhog.stdout_tail
    assert ("MemoryError" in memhog.stderr_tail) or ("memory limit" in memhog.stderr_tail), memhog.stderr_tail

    loud = results["loud"]
    assert loud.status == "completed" and loud.exit_code == 0, summary
    assert loud.stdout_tail.endswith("LAST LINE\n") and len(loud.stdout_tail) < 65 * 1024
    assert "earlier bytes dropped" in loud.stdout_tail.splitlines()[0]
    assert int(loud.stdout_tail.split()[1]) > 100 * (1 << 20) - 70 * 1024  # nothing lost on the way

    bigout = results["bigout"]
    assert bigout.status == "failed" and bigout.output_truncated, summary
    assert "VERI_OUTPUT_DIR grew" in bigout.stderr_tail
    kept = sorted(p.name for p in Path(bigout.output_dir).iterdir())
    assert kept == ["a-answer.txt"], kept  # files in name order up to output_max_bytes

    assert results["nocall"].status == "completed" and "without calling" in results["nocall"].stdout_tail

    assert not docker_client.containers.list(all=True, filters={"label": f"veri.launcher={launcher_id}"})
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.endswith(".logs")]

    # The hang rollout's grandchild wrote when it started (else there is nothing to check) and was due to
    # write again 6 s later, after its sandbox's 4 s: wait past that (+2 s), however slowly the box ran it.
    started = Path(hang.output_dir) / "grandchild-started"
    assert started.exists(), "the hang rollout's grandchild never started"
    time.sleep(max(0.0, float(started.read_text()) + 6 + 2 - time.time()))
    assert not (Path(hang.output_dir) / "grandchild-alive").exists(), "a grandchild outlived its sandbox"


def _host_addresses() -> list[str]:
    return sorted({a.address for addrs in psutil.net_if_addrs().values() for a in addrs
                   if a.family == socket.AF_INET and not a.address.startswith("127.")})


class _Listeners:
    """Stand-ins for the policy, launcher and trainer ports, on every host address (0.0.0.0)."""

    def __init__(self, count: int) -> None:
        self.sockets = []
        for _ in range(count):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("0.0.0.0", 0))
            s.listen(16)
            self.sockets.append(s)
        self.accepted = 0
        for s in self.sockets:
            threading.Thread(target=self._accept, args=(s,), daemon=True).start()

    @property
    def ports(self) -> list[int]:
        return [s.getsockname()[1] for s in self.sockets]

    def _accept(self, s: socket.socket) -> None:
        while True:
            try:
                conn, _ = s.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        for s in self.sockets:
            s.close()


def test_isolation_from_inside_a_sandbox(backend, harness_image, docker_client, rollouts_network, tmp_path,
                                        monkeypatch):
    # A service on the rollouts network (where the proxy lives): the one thing a sandbox may reach.
    service = docker_client.containers.run(
        BASE, ["python3", "-m", "http.server", "8000"], detach=True, network=rollouts_network, runtime="runsc",
        labels={LABEL: SESSION}, name=f"veri-test-svc-{uuid.uuid4().hex[:8]}",
    )
    listeners = _Listeners(3)
    try:
        # Reachable from the host, so the probe below proves the sandbox's isolation, not a dead port.
        for port in listeners.ports:
            socket.create_connection(("127.0.0.1", port), timeout=3).close()
        hosts = _host_addresses()
        targets = [[host, port] for host in hosts for port in [*listeners.ports, 2375, 2376]]
        deadline = time.monotonic() + 30
        while "Serving" not in service.logs().decode() and time.monotonic() < deadline:
            time.sleep(0.2)
        targets.append([service.name, 8000])
        monkeypatch.setenv("VERI_TEST_HOST_SECRET", "hunter2-host-only")
        probe = launch(harness_image, "probe", {"fault": "probe", "targets": targets}, timeout_s=120)
        before = listeners.accepted
        [result] = asyncio.run(run_group(backend, GroupLaunch(launches=[probe]), tmp_path / "out"))
    finally:
        listeners.close()
        service.remove(force=True)
    assert result.status == "completed", result
    seen = json.loads((Path(result.output_dir) / "probe.json").read_text())

    assert seen["connect"].pop(f"{service.name}:8000") == "open", seen["connect"]
    assert hosts and all(state != "open" for state in seen["connect"].values()), seen["connect"]
    assert listeners.accepted == before
    assert seen["docker_sock"] == []

    env = seen["env"]
    image_env = {item.split("=", 1)[0] for item in docker_client.images.get(harness_image).attrs["Config"]["Env"]}
    allowed = set(probe.env) | {"VERI_OUTPUT_DIR"} | image_env | {"HOSTNAME", "HOME", "PWD"}
    assert set(env) <= allowed, set(env) - allowed
    assert env["VERI_OUTPUT_DIR"] == "/veri/output" and env["OPENAI_API_KEY"] == "key-probe"
    assert "VERI_TEST_HOST_SECRET" not in env and not any("hunter2" in v for v in env.values())

    assert seen["uid"] == 1000 and seen["cwd"] == "/harness"
    status = dict(line.split(":\t", 1) for line in seen["proc_status"].splitlines() if ":\t" in line)
    assert int(status["CapEff"].strip(), 16) == 0 and int(status["CapBnd"].strip(), 16) == 0
    if "NoNewPrivs" in status:
        assert status["NoNewPrivs"].strip() == "1"
    assert "gVisor" in seen["dmesg"]
    writable = seen["writable"]
    assert not writable["/"] and not writable["/etc"] and not writable["/harness"], writable
    assert writable["/tmp"] and writable["/work"] and writable[env["HOME"]] and writable["/veri/output"], writable


def test_leftovers_of_a_crashed_launcher_are_removed(backend, docker_client, launcher_id):
    def sleeper(owner: str):
        return docker_client.containers.run(
            BASE, ["sleep", "300"], detach=True, runtime="runsc", network_mode="none",
            labels={LABEL: SESSION, "veri.sandbox": "1", "veri.launcher": owner, "veri.rollout_id": "old"},
        )

    mine, other = sleeper(launcher_id), sleeper(f"{launcher_id}-other")
    try:
        assert asyncio.run(backend.remove_leftovers()) == 1
        ids = {c.id for c in docker_client.containers.list(all=True, filters={"label": LABEL})}
        assert mine.id not in ids and other.id in ids
    finally:
        for container in (mine, other):
            try:
                container.remove(force=True)
            except Exception:  # noqa: BLE001 - already gone
                pass


def test_missing_image_is_an_infrastructure_error(backend, tmp_path):
    missing = launch("veri/harness-does-not-exist:0", "r-missing", {})
    [result] = asyncio.run(run_group(backend, GroupLaunch(launches=[missing]), tmp_path / "out"))
    assert result.status == "failed" and "veri harness build" in result.infrastructure_error


def test_runs_under_runsc(backend):
    assert backend.runtime == "runsc"
