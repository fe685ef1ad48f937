"""`veri serve launcher` over HTTP (local backend: no docker needed) and the trainer's LauncherClient."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from testkit.servers import free_port, start_server
from tests.launcher.test_local_backend import bundle, launch
from veri.core.launch import GroupLaunch
from veri.services.launcher.client import LauncherClient


@pytest.mark.needs("process")
def test_group_over_http(tmp_path):
    ok = bundle(tmp_path, "ok", "import os, pathlib\nprint('hi', os.environ['VERI_ROLLOUT_ID'])\n"
                                 "pathlib.Path(os.environ['VERI_OUTPUT_DIR'], 'a.txt').write_text('1')\n")
    bad = bundle(tmp_path, "bad", "raise SystemExit(4)\n")
    out = tmp_path / "out"
    with start_server(["serve", "launcher", "--backend", "local", "--output-root", str(out)],
                      env={"VERI_CONTROL_TOKEN": ""}) as server:
        health = httpx.get(server.url + "/health").json()
        assert health["ok"] and health["backend"] == "local"

        client = LauncherClient(server.url, subdir="job-1/step-0")
        group = GroupLaunch(max_parallel=2, launches=[launch(ok, "r-ok"), launch(bad, "r-bad")])
        results = asyncio.run(client.run_group(group))
        assert [r.rollout_id for r in results] == ["r-ok", "r-bad"]
        assert results[0].status == "completed" and "hi r-ok" in results[0].stdout_tail
        assert Path(results[0].output_dir) == out.absolute() / "job-1/step-0/r-ok"
        assert (Path(results[0].output_dir) / "a.txt").read_text() == "1"
        assert results[1].status == "failed" and results[1].exit_code == 4

        reply = httpx.post(server.url + "/v1/groups", params={"subdir": "../x"}, content=group.model_dump_json(),
                           headers={"content-type": "application/json"})
        assert reply.status_code == 400
        dup = GroupLaunch(launches=[launch(ok, "same"), launch(ok, "same")])
        assert httpx.post(server.url + "/v1/groups", content=dup.model_dump_json(),
                          headers={"content-type": "application/json"}).status_code == 400


@pytest.mark.needs("process")
def test_token_required_when_configured(tmp_path):
    ok = bundle(tmp_path, "ok", "print('x')\n")
    group = GroupLaunch(launches=[launch(ok, "r1")])
    with start_server(["serve", "launcher", "--backend", "local", "--output-root", str(tmp_path / "out")],
                      env={"VERI_CONTROL_TOKEN": "s3cret"}) as server:
        [denied] = asyncio.run(LauncherClient(server.url).run_group(group))
        assert denied.status == "failed" and "401" in denied.infrastructure_error
        [allowed] = asyncio.run(LauncherClient(server.url, token="s3cret").run_group(group))
        assert allowed.status == "completed", allowed


def test_unreachable_launcher_is_a_failed_result_per_rollout(tmp_path):
    ok = bundle(tmp_path, "ok", "print('x')\n")
    client = LauncherClient(f"http://127.0.0.1:{free_port()}", connect_retries=0)
    results = asyncio.run(client.run_group(GroupLaunch(launches=[launch(ok, "a"), launch(ok, "b")])))
    assert [r.status for r in results] == ["failed", "failed"]
    assert all("unreachable" in r.infrastructure_error for r in results)
