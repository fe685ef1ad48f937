"""The launcher's `/metrics`: a group through `veri serve launcher --backend local` moves the sandbox
counters by exactly its outcomes (completed, exit non-zero, timeout, a bundle that cannot start, a
client that goes away); the route needs the launcher's token; no rollout id becomes a label."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from testkit.servers import start_server
from tests.launcher.test_local_backend import bundle, launch
from tests.prometheus import Scrape
from veri.core.launch import GroupLaunch
from veri.services.launcher.client import LauncherClient

pytestmark = pytest.mark.needs("process")

TOKEN = {"authorization": "Bearer s3cret"}


def scrape(url: str) -> Scrape:
    reply = httpx.get(f"{url}/metrics", headers=TOKEN, timeout=10)
    assert reply.status_code == 200, reply.text
    return Scrape(reply.text)


def test_sandbox_outcomes_are_counted_exactly(tmp_path):
    ok = bundle(tmp_path, "ok", "print('hi')\n")
    bad = bundle(tmp_path, "bad", "raise SystemExit(4)\n")
    hang = bundle(tmp_path, "hang", "import time\ntime.sleep(600)\n")
    missing = tmp_path / "no-such-bundle"
    group = GroupLaunch(max_parallel=5, launches=[
        launch(ok, "r-ok-1"), launch(ok, "r-ok-2"), launch(bad, "r-bad"), launch(hang, "r-hang", timeout_s=1),
        launch(missing, "r-missing"),
    ])
    with start_server(["serve", "launcher", "--backend", "local", "--output-root", str(tmp_path / "out")],
                      env={"VERI_CONTROL_TOKEN": "s3cret"}) as server:
        assert httpx.get(f"{server.url}/metrics").status_code == 401
        before = scrape(server.url)
        assert before.value("veri_launcher_sandbox_launches_total", backend="local") == 0
        assert before.value("veri_launcher_sandboxes_running") == 0

        results = asyncio.run(LauncherClient(server.url, token="s3cret").run_group(group))
        assert [r.status for r in results] == ["completed", "completed", "failed", "truncated", "failed"]
        after = scrape(server.url)
        assert after.value("veri_launcher_sandbox_launches_total", backend="local") == 5
        assert after.value("veri_launcher_sandbox_results_total", status="completed") == 2
        assert after.value("veri_launcher_sandbox_results_total", status="failed") == 2
        assert after.value("veri_launcher_sandbox_results_total", status="truncated") == 1
        assert after.value("veri_launcher_sandbox_failures_total", reason="exit_nonzero") == 1
        assert after.value("veri_launcher_sandbox_failures_total", reason="timeout") == 1
        assert after.value("veri_launcher_sandbox_failures_total", reason="infrastructure_error") == 1
        assert after.value("veri_launcher_sandbox_failures_total") == 3
        assert after.value("veri_launcher_sandbox_seconds_count") == 5
        assert after.value("veri_launcher_sandbox_seconds_sum", status="truncated") >= 1.0  # killed at its timeout
        assert after.value("veri_launcher_sandboxes_running") == 0
        assert after.value("veri_launcher_requests_total", route="/v1/groups", status="200") == 1
        assert after.value("veri_launcher_requests_in_flight", route="/v1/groups") == 0

        # A trainer that goes away mid-group: its sandbox is running, then removed and counted cancelled.
        slow = GroupLaunch(launches=[launch(hang, "r-gone", timeout_s=300)])
        with httpx.Client(base_url=server.url, headers=TOKEN, timeout=httpx.Timeout(10, read=2)) as client:
            try:
                client.post("/v1/groups", content=slow.model_dump_json(), headers={"content-type": "application/json"})
                raise AssertionError("the group answered before its sandbox's 300 s timeout")
            except httpx.ReadTimeout:
                pass
        # The 499 is counted once the handler has cancelled the group, after the sandbox's own count.
        cancelled = _wait_for(server.url, lambda s: "499" in s.label_values("veri_launcher_requests_total", "status"))
        assert cancelled.value("veri_launcher_sandbox_results_total", status="cancelled") == 1
        assert cancelled.value("veri_launcher_sandbox_failures_total", reason="cancelled") == 1
        assert cancelled.value("veri_launcher_sandbox_launches_total") == 6
        assert cancelled.value("veri_launcher_sandboxes_running") == 0
        assert cancelled.value("veri_launcher_requests_total", route="/v1/groups", status="499") == 1

    for rollout_id in ("r-ok-1", "r-bad", "r-hang", "r-missing", "r-gone"):
        assert rollout_id not in cancelled.text
    assert cancelled.label_values("veri_launcher_requests_total", "route") <= {"/health", "/v1/groups"}


def _wait_for(url: str, ready, timeout_s: float = 30.0) -> Scrape:
    deadline = time.monotonic() + timeout_s
    while True:
        current = scrape(url)
        if ready(current):
            return current
        assert time.monotonic() < deadline, f"not there after {timeout_s}s:\n{current.text}"
        time.sleep(0.2)
