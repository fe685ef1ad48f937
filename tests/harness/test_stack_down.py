"""`veri run-harness` with the stack down runs `make up`, which makes a new control
token; the run must use that token, not the one read before (it was a 401 and a traceback)."""

from __future__ import annotations

import subprocess

import httpx
import pytest

from veri import cli
from veri.services.proxy.control_client import ControlClient
from veri.tools.harness import run as run_module


def test_the_token_of_the_stack_make_up_started_is_used(tmp_path, monkeypatch):
    state = tmp_path / "state"
    state.mkdir()
    (state / "control_token").write_text("old-token\n")
    monkeypatch.setenv("VERI_STATE_DIR", str(state))
    monkeypatch.delenv("VERI_CONTROL_TOKEN", raising=False)
    up = {"ran": False}

    def make_up(command, **_):  # what scripts/stack/up.sh does to the token when the stack was down
        assert command[-1] == "up"
        (state / "control_token").write_text("new-token\n")
        up["ran"] = True
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(run_module, "_healthy", lambda url: up["ran"])
    monkeypatch.setattr(run_module.subprocess, "run", make_up)
    monkeypatch.setattr(run_module, "image_for", lambda options: "veri/harness-x")
    seen = {}

    class Stop(Exception):
        pass

    def control(url, *, token=None, **_):
        seen["token"] = token
        raise Stop

    monkeypatch.setattr(run_module, "ControlClient", control)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "veri-harness.toml").write_text('name = "b"\nentrypoint = ["python", "main.py"]\n'
                                             'base_image = "veri/base"\nprotocol = "openai"\n')
    (bundle / "main.py").write_text("print('x')\n")
    options = run_module.RunOptions(
        bundle=bundle, task={"prompt": "p"}, task_index=0, n=1, out=tmp_path / "out", sandbox="docker",
        proxy_url="http://127.0.0.1:9", control_token=run_module.default_control_token(), model_name="m",
        max_turns=2, timeout_s=10, start_stack=True)
    assert options.control_token == "old-token"
    with pytest.raises(Stop):
        run_module.run(options)
    assert seen["token"] == "new-token"


def test_a_refused_call_reaches_the_user_as_one_line_with_the_fix(tmp_path, capsys, monkeypatch):
    """No expected failure of a `veri` command is a traceback: the line and the fix, the traceback logged."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))

    def refused(args):
        transport = httpx.MockTransport(lambda request: httpx.Response(401, json={"error": "bad token"}))
        client = ControlClient("http://proxy:8000", token="stale")
        client._json._http = httpx.Client(base_url="http://proxy:8000", transport=transport)
        client.open_session()

    monkeypatch.setattr(cli, "build_parser", lambda: _parser(refused))
    assert cli.main([]) == 1
    err = capsys.readouterr().err
    assert err.startswith("veri: capture proxy at http://proxy:8000: POST /control/sessions -> 401")
    assert "Traceback" not in err and "veri-cli-errors.log" in err
    assert "Traceback" in (tmp_path / "veri-cli-errors.log").read_text()


def _parser(func):
    import argparse

    parser = argparse.ArgumentParser()
    parser.set_defaults(func=func)
    return parser
