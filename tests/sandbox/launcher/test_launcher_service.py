"""`veri serve launcher --backend docker`: leftovers removed at start, a group over HTTP, and a clear
refusal when it cannot sandbox."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from pathlib import Path

from testkit.servers import start_server
from tests.sandbox.conftest import BASE, LABEL, SESSION
from veri.core.launch import GroupLaunch, RolloutLaunch
from veri.services.launcher.client import LauncherClient


def test_service_removes_leftovers_then_runs_groups(docker_client, rollouts_network, harness_image, tmp_path):
    launcher_id = f"test-svc-{uuid.uuid4().hex[:8]}"
    leftover = docker_client.containers.run(
        BASE, ["sleep", "300"], detach=True, runtime="runsc", network_mode="none",
        labels={LABEL: SESSION, "veri.sandbox": "1", "veri.launcher": launcher_id},
    )
    try:
        with start_server(["serve", "launcher", "--network", rollouts_network, "--launcher-id", launcher_id,
                           "--output-root", str(tmp_path / "out")], env={"VERI_CONTROL_TOKEN": ""}) as server:
            ids = {c.id for c in docker_client.containers.list(all=True, filters={"label": LABEL})}
            assert leftover.id not in ids
            launch = RolloutLaunch(rollout_id="svc-ok", image=harness_image, timeout_s=60,
                                   env={"VERI_ROLLOUT_ID": "svc-ok", "VERI_TASK": json.dumps({"fault": "ok", "n": 5})})
            [result] = asyncio.run(LauncherClient(server.url, subdir="job").run_group(GroupLaunch(launches=[launch])))
            assert result.status == "completed", result
            assert Path(result.output_dir) == (tmp_path / "out" / "job" / "svc-ok").absolute()
            assert (Path(result.output_dir) / "answer.txt").read_text() == "10"
            health = asyncio.run(LauncherClient(server.url).health())
            assert health["runtime"] == "runsc" and health["network"] == rollouts_network
    finally:
        try:
            leftover.remove(force=True)
        except Exception:  # noqa: BLE001 - removed by the launcher, as it should be
            pass


def test_refuses_to_start_without_its_network(docker_client, tmp_path):
    result = subprocess.run([sys.executable, "-m", "veri.cli", "serve", "launcher", "--network", "veri-no-such-net",
                             "--output-root", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "docker network 'veri-no-such-net' does not exist" in result.stderr and "--internal" in result.stderr
