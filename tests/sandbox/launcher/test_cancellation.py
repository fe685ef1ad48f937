"""A stopped trainer leaves no sandbox running: a cancelled group removes its sandboxes at once, in
process (`run_group` over the DockerBackend, a cancel landing mid-create included) and through the
launcher service (the client goes away mid-group)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest

from testkit.servers import start_server
from veri.core.launch import GroupLaunch, RolloutLaunch
from veri.services.launcher.client import LauncherClient
from veri.services.launcher.docker_backend import LABEL_LAUNCHER, LABEL_ROLLOUT, DockerBackend
from veri.services.launcher.group import run_group

HANG = json.dumps({"fault": "hang", "grandchild_delay": 600})  # harness_main.py: sleeps 600 s


def hanging_group(prefix: str, image: str, size: int = 2) -> GroupLaunch:
    launches = [RolloutLaunch(rollout_id=f"{prefix}-{i}", image=image, timeout_s=600,
                              env={"VERI_ROLLOUT_ID": f"{prefix}-{i}", "VERI_TASK": HANG}) for i in range(size)]
    return GroupLaunch(launches=launches, max_parallel=size)


def sandboxes(docker_client, label: str, *, running: bool = False) -> list:
    # sparse: no inspect per container, which races the removal this file waits for (NotFound)
    return docker_client.containers.list(all=not running, filters={"label": label}, sparse=True)


async def wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:g} s waiting for {what}")
        await asyncio.sleep(0.2)


def test_a_cancelled_group_removes_its_sandboxes_before_the_cancel_returns(
        backend, docker_client, harness_image, tmp_path):
    prefix = f"cancel-{uuid.uuid4().hex[:6]}"
    label = f"{LABEL_ROLLOUT}={prefix}-0"

    async def scenario() -> None:
        task = asyncio.create_task(run_group(backend, hanging_group(prefix, harness_image), tmp_path / "out"))
        await wait_for(lambda: len(sandboxes(docker_client, f"{LABEL_LAUNCHER}={backend.launcher_id}",
                                             running=True)) >= 2, 60, "both sandboxes running")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert not sandboxes(docker_client, label) and not sandboxes(docker_client, f"{LABEL_ROLLOUT}={prefix}-1")
    assert not list((tmp_path / "out").glob(".*.logs")), "the logs folders go with the sandboxes"


class SlowCreate(DockerBackend):
    """Docker creates the container, then the pool thread lingers: a cancel lands while `create` runs."""

    created = None  # asyncio.Event, set from the pool thread

    def _create(self, *args, **kwargs):
        container = super()._create(*args, **kwargs)
        self.loop.call_soon_threadsafe(self.created.set)
        time.sleep(1.0)
        return container


def test_a_cancel_while_docker_creates_the_container_still_removes_it(
        docker_client, rollouts_network, launcher_id, harness_image, tmp_path):
    slow = SlowCreate(network=rollouts_network, launcher_id=launcher_id, max_sandboxes=2)
    prefix = f"mid-create-{uuid.uuid4().hex[:6]}"
    label = f"{LABEL_ROLLOUT}={prefix}-0"

    async def scenario() -> None:
        slow.loop, slow.created = asyncio.get_running_loop(), asyncio.Event()
        task = asyncio.create_task(run_group(slow, hanging_group(prefix, harness_image, size=1), tmp_path / "out"))
        await asyncio.wait_for(slow.created.wait(), 60)
        assert sandboxes(docker_client, label), "the container exists while create() is still running"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # the pool thread finishes create() about 1 s later and removes what it made
        await wait_for(lambda: not sandboxes(docker_client, label), 10, "the half-created sandbox to go")

    try:
        asyncio.run(scenario())
    finally:
        slow.close()


def test_the_launcher_cancels_a_group_whose_client_went_away(docker_client, rollouts_network, harness_image,
                                                             tmp_path):
    launcher_id = f"test-gone-{uuid.uuid4().hex[:8]}"
    label = f"{LABEL_LAUNCHER}={launcher_id}"
    with start_server(["serve", "launcher", "--network", rollouts_network, "--launcher-id", launcher_id,
                       "--output-root", str(tmp_path / "out")], env={"VERI_CONTROL_TOKEN": ""}) as server:

        async def scenario() -> None:
            client = LauncherClient(server.url, subdir="job")
            request = asyncio.create_task(client.run_group(hanging_group("gone", harness_image)))
            await wait_for(lambda: len(sandboxes(docker_client, label, running=True)) >= 2, 60,
                           "both sandboxes running")
            request.cancel()  # the trainer stops: its HTTP connection closes
            with pytest.raises(asyncio.CancelledError):
                await request
            await wait_for(lambda: not sandboxes(docker_client, label), 10, "the launcher to remove the sandboxes")

        asyncio.run(scenario())
        assert "client went away mid-group" in server.log()
        # and the launcher still serves the next group
        ok = RolloutLaunch(rollout_id="after", image=harness_image, timeout_s=60,
                           env={"VERI_ROLLOUT_ID": "after", "VERI_TASK": json.dumps({"fault": "ok", "n": 1})})
        [result] = asyncio.run(LauncherClient(server.url).run_group(GroupLaunch(launches=[ok])))
        assert result.status == "completed", result
