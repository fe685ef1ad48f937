"""One auth rule for every service with control routes (core/auth.py; docs/security.md, "One auth rule")."""

from __future__ import annotations

import subprocess
import sys

import pytest
from fastapi.testclient import TestClient

from tests.launcher.test_local_backend import bundle, launch
from veri.core.auth import BindRefused, bearer, is_loopback, refusal, refuse_open_bind
from veri.core.launch import GroupLaunch
from veri.services.launcher.app import create_app
from veri.services.launcher.settings import LauncherSettings


@pytest.mark.needs("app")
@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.53", "::1", "[::1]", "localhost"])
def test_loopback_hosts(host):
    assert is_loopback(host)


@pytest.mark.needs("app")
@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "::", "proxy", "", None, "testclient"])
def test_other_hosts_are_not_loopback(host):
    assert not is_loopback(host)


@pytest.mark.needs("app")
def test_the_rule():
    # A token: the request must bear it, from anywhere (loopback included).
    assert refusal(token="t", presented="t", client_host="10.0.0.9", what="x") is None
    assert "control token" in refusal(token="t", presented=None, client_host="127.0.0.1", what="x")
    assert refusal(token="t", presented="u", client_host="127.0.0.1", what="x")
    # No token: loopback only, and the refusal names the variable to set.
    assert refusal(token=None, presented=None, client_host="127.0.0.1", what="x") is None
    assert "VERI_CONTROL_TOKEN" in refusal(token=None, presented="anything", client_host="10.0.0.9", what="x")
    assert bearer("Bearer  abc ") == "abc" and bearer("Basic abc") is None and bearer(None) is None


@pytest.mark.needs("app")
def test_an_open_bind_without_a_token_is_refused_with_the_fix(monkeypatch):
    refuse_open_bind(service="s", host="127.0.0.1", token=None)
    refuse_open_bind(service="s", host="0.0.0.0", token="t")
    with pytest.raises(BindRefused, match="VERI_CONTROL_TOKEN.*or bind 127.0.0.1"):
        refuse_open_bind(service="s", host="0.0.0.0", token=None)
    with pytest.raises(BindRefused, match="ALLOW=1"):
        refuse_open_bind(service="s", host="0.0.0.0", token=None, allow_env="ALLOW")
    monkeypatch.setenv("ALLOW", "1")
    refuse_open_bind(service="s", host="0.0.0.0", token=None, allow_env="ALLOW")


@pytest.mark.needs("process")
@pytest.mark.parametrize("service", ["proxy", "launcher", "policy", "console"])
def test_veri_serve_refuses_a_non_loopback_bind_without_a_token(service, tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    args = {"proxy": ["--model", str(tmp_path), "--policy-url", "http://127.0.0.1:9"], "launcher": [],
            "policy": ["--model", str(tmp_path)], "console": ["--state", str(tmp_path)]}[service]
    done = subprocess.run([sys.executable, "-m", "veri.cli", "serve", service, *args, "--host", "0.0.0.0",
                           "--port", "9"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no control token is set" in done.stdout + done.stderr
    assert ("VERI_CONSOLE_TOKEN" if service == "console" else "VERI_CONTROL_TOKEN") in done.stdout + done.stderr


@pytest.mark.needs("app")
def test_the_launcher_without_a_token_serves_loopback_clients_only(tmp_path):
    """It used to accept any client when no token was set."""
    group = GroupLaunch(launches=[launch(bundle(tmp_path, "ok", "print('x')\n"), "r1")])
    app = create_app(LauncherSettings(backend="local", output_root=tmp_path / "out"))
    body, headers = group.model_dump_json(), {"content-type": "application/json"}
    with TestClient(app, client=("10.1.2.3", 40000)) as remote:
        refused = remote.post("/v1/groups", content=body, headers=headers)
        assert refused.status_code == 401 and "VERI_CONTROL_TOKEN" in refused.text
    with TestClient(app, client=("127.0.0.1", 40000)) as local:
        [result] = local.post("/v1/groups", content=body, headers=headers).json()
    assert result["status"] == "completed"


@pytest.mark.needs("app")
def test_the_policy_weight_route_follows_the_rule(tiny_model, tmp_path):
    from veri.services.policy.hf.server import create_app as policy_app
    from veri.services.policy.hf.settings import PolicySettings

    for token, client, headers, allowed in [(None, "10.1.2.3", {}, False), (None, "127.0.0.1", {}, True),
                                           ("t", "127.0.0.1", {}, False),
                                           ("t", "10.1.2.3", {"authorization": "Bearer t"}, True)]:
        app = policy_app(PolicySettings(model_dir=tiny_model, threads=1, token=token))
        with TestClient(app, client=(client, 40000)) as http:
            # A path that does not exist: past the auth check it is a 4xx/5xx of the update, not a 401.
            answer = http.post("/update_weights", json={"path": str(tmp_path / "none.safetensors")},
                               headers=headers)
        assert (answer.status_code != 401) is allowed, (token, client, answer.text)
