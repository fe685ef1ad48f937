"""Every service logs one JSON line per event (infra/logging.py): started the way the stack starts them,
each one's whole log parses, with timestamp, level, service and event on every line, its requests in the
access log (route, status, duration), and library records (uvicorn, gunicorn) in the same stream. The
proxy's log is read the same way in tests/proxy/test_worker_killed.py, the trainer's train.log in
tests/trainer/test_archive.py."""

from __future__ import annotations

import logging
import time

import httpx
import pytest

from testkit.servers import start_server, stop_server
from tests.logs import json_events, requests_logged
from veri.core import envs
from veri.infra.logging import log_format


def _served(args: list[str], service: str, paths: list[str], **server: object) -> list[dict]:
    with start_server(args, **server) as running:
        for path in paths:
            httpx.get(f"{running.url}{path}", timeout=30)
        stop_server(running)  # its shutdown lines too
        return json_events(running.log(), service)


@pytest.mark.needs("process")
def test_console_webfixture_and_launcher_log_json(tmp_path):
    (tmp_path / "jobs").mkdir()
    services = {  # service: (its command, {path: the status each request gets})
        "console": (["serve", "console", "--state", str(tmp_path)], {"/api/jobs": 200, "/no-such-page": 404}),
        "webfixture": (["serve", "webfixture"], {"/pages/1.html": 200, "/pages/x": 404}),
        "launcher": (["serve", "launcher", "--backend", "local", "--output-root", str(tmp_path / "out")],
                     {"/v1/groups": 405, "/no-such-route": 404}),
    }
    for service, (args, expected) in services.items():
        events = _served(args, service, ["/health", *expected])
        logged = requests_logged(events)
        # Health checks come every few seconds: logged only when they fail.
        assert {event["path"]: event["status"] for event in logged} == expected, (service, logged)
        assert all(isinstance(event["duration_ms"], float) for event in logged)
        loggers = {event.get("logger") for event in events}
        assert "uvicorn.error" in loggers, (service, loggers)  # a library's records, in the same stream
        if service == "console":  # under gunicorn: its master's lines too
            assert "gunicorn.error" in loggers
            assert [event["route"] for event in logged] == ["/api/jobs", None]


def test_policy_logs_json(policy_server):
    httpx.post(f"{policy_server.url}/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 2}, timeout=60)
    httpx.post(f"{policy_server.url}/v1/completions", content=b"{", timeout=60)  # not JSON: a 400
    # The access log's line is written once the reply's last byte is sent: the client may read it first.
    deadline = time.monotonic() + 15
    while True:
        logged = requests_logged(json_events(policy_server.log(), "policy"))
        statuses = [(event["route"], event["status"]) for event in logged if event["path"] == "/v1/completions"]
        if {("/v1/completions", 200), ("/v1/completions", 400)} <= set(statuses) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert ("/v1/completions", 200) in statuses and ("/v1/completions", 400) in statuses, statuses


@pytest.mark.needs("process")
def test_console_format_is_for_a_person(tmp_path):
    with start_server(["serve", "webfixture"], env={envs.VERI_LOG_FORMAT: "console"}) as running:
        httpx.get(f"{running.url}/pages/2.html", timeout=30)
        stop_server(running)
        lines = running.log().splitlines()
    assert lines and not any(line.startswith("{") for line in lines), lines
    assert any("request" in line and "/pages/2.html" in line and "status=200" in line for line in lines), lines


def test_an_unknown_format_names_the_choices(monkeypatch):
    monkeypatch.setenv(envs.VERI_LOG_FORMAT, "xml")
    with pytest.raises(SystemExit, match="VERI_LOG_FORMAT='xml': set it to json .* or console"):
        log_format()


def test_the_trainers_library_log_is_json(tmp_path):
    from veri.infra.quiet import quiet_libraries

    path = tmp_path / "logs" / "libraries.log"
    with quiet_libraries(path):
        logging.getLogger("transformers.modeling_utils").warning("weights not initialized: %s", "lm_head")
    (event,) = json_events(path.read_text(), "trainer")
    assert (event["level"], event["logger"], event["event"]) == (
        "warning", "transformers.modeling_utils", "weights not initialized: lm_head")
