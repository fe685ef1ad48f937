"""The console is safe from other web pages (services/console/guard.py; docs/security.md)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from veri.services.console.app import create_app
from veri.services.console.guard import CSP, host_name
from veri.services.console.settings import ConsoleSettings

pytestmark = pytest.mark.needs("app")


def _client(tmp_path, **settings) -> TestClient:
    (tmp_path / "jobs").mkdir(exist_ok=True)
    return TestClient(create_app(ConsoleSettings(state_dir=tmp_path, **settings)), base_url="http://127.0.0.1:8300")


def test_a_foreign_host_is_refused_with_the_fix(tmp_path):
    """A DNS-rebinding page reaches 127.0.0.1:8300 under its own name: it reads nothing."""
    client = _client(tmp_path)
    for path in ("/api/jobs", "/", "/jobs/x"):
        refused = client.get(path, headers={"host": "evil.example:8300"})
        assert refused.status_code == 400, path
        assert "evil.example" in refused.text and "--allowed-host" in refused.text
        assert "jobs" not in refused.text.replace("/jobs", "")
    assert client.get("/health", headers={"host": "10.0.0.7:8300"}).status_code == 200  # probes: no data


def test_loopback_and_configured_names_are_answered(tmp_path):
    client = _client(tmp_path, allowed_hosts=("veri.lab",))
    for host in ("127.0.0.1:8300", "localhost:8300", "[::1]:8300", "localhost", "veri.lab:8300", "VERI.lab"):
        assert client.get("/api/jobs", headers={"host": host}).status_code == 200, host


def test_every_answer_carries_the_content_security_policy(tmp_path):
    client = _client(tmp_path)
    for path in ("/", "/api/jobs", "/static/console.js", "/no-such-page"):
        answer = client.get(path)
        assert answer.headers["content-security-policy"] == CSP, path
        assert answer.headers["x-content-type-options"] == "nosniff"
    assert "script-src 'self'" in CSP and "frame-ancestors 'none'" in CSP
    assert client.get("/", headers={"host": "evil.example"}).headers["content-security-policy"] == CSP


def test_a_token_guards_every_page_and_a_link_with_it_sets_a_cookie(tmp_path):
    client = _client(tmp_path, token="s3cret")
    assert client.get("/api/jobs").status_code == 401
    assert client.get("/api/jobs", headers={"authorization": "Bearer nope"}).status_code == 401
    assert client.get("/api/jobs", headers={"authorization": "Bearer s3cret"}).status_code == 200
    assert client.get("/health").status_code == 200
    first = client.get("/?token=s3cret")
    assert first.status_code == 200 and "HttpOnly" in first.headers["set-cookie"]
    assert "SameSite=Strict" in first.headers["set-cookie"]
    assert client.get("/api/jobs").status_code == 200  # the cookie from the link
    client.cookies.clear()
    assert client.get("/?token=wrong").status_code == 401


def test_host_names():
    assert host_name("127.0.0.1:8300") == "127.0.0.1"
    assert host_name("[::1]:8300") == "::1"
    assert host_name("localhost") == "localhost"
