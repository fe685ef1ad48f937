"""The real Codex CLI (`codex exec`, the native binary from its npm package) through the capture
proxy's Responses route to the tiny model: a three-call tool loop (the scripted policy makes the
random model run two shell commands, then answer), streamed, store: false, bridged."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.codex import codex_binary
from testkit.proxy_script import proxy_args
from testkit.servers import RunningServer, start_server
from tests.proxy.conftest import assert_bridged_chain
from veri.services.proxy.control_client import ControlClient

pytestmark = [pytest.mark.needs("docker"), pytest.mark.slow]

PROMPT = "Print both codex markers with the shell, one command each, then name them."
ANSWER = "The markers were veri-codex-one and veri-codex-two."


def exec_command(cmd: str) -> str:
    return f"<tool_call>\n{json.dumps({'name': 'exec_command', 'arguments': {'cmd': cmd}})}\n</tool_call>"


# The last user turn holds the latest tool output, so the later marker's rule comes first.
SCRIPT = [
    {"if_last_user_turn_contains": "veri-codex-two", "reply": ANSWER},
    {"if_last_user_turn_contains": "veri-codex-one", "reply": exec_command("echo veri-codex-two")},
    {"if_last_user_turn_contains": "Print both codex markers", "reply": exec_command("echo veri-codex-one")},
]


@pytest.fixture(scope="module")
def codex_policy(tiny_model: Path, tmp_path_factory) -> Iterator[RunningServer]:
    folder = tmp_path_factory.mktemp("codex")
    (folder / "script.json").write_text(json.dumps(SCRIPT))
    with start_server(["serve", "policy", "--model", str(tiny_model), "--scripted-replies",
                       str(folder / "script.json")]) as policy:
        yield policy


@pytest.fixture(scope="module")
def codex_proxy(codex_policy: RunningServer, tiny_model: Path, tmp_path_factory) -> Iterator[RunningServer]:
    with start_server(proxy_args(codex_policy.url, tiny_model, tmp_path_factory.mktemp("spans"))) as proxy:
        yield proxy


def run_codex(session, tmp_path: Path, *, web_search: str | None) -> subprocess.CompletedProcess:
    """`codex exec` with a config that names the provider; `web_search` None: no word about it (Codex's default)."""
    codex_home, workdir = tmp_path / "codex-home", tmp_path / "work"
    codex_home.mkdir()
    workdir.mkdir()
    web_search_line = f'web_search = "{web_search}"' if web_search is not None else ""
    (codex_home / "config.toml").write_text(f"""
model = "tiny"
model_provider = "veri"
{web_search_line}

[model_providers.veri]
name = "veri capture proxy"
base_url = "{session.openai_base_url}"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
""")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "CODEX_HOME": str(codex_home),
           "OPENAI_API_KEY": session.api_key}
    return subprocess.run(
        [str(codex_binary()), "exec", "--skip-git-repo-check", "-s", "danger-full-access", PROMPT],
        env=env, cwd=workdir, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)


def test_codex_exec_tool_loop_is_captured_and_bridged(codex_proxy, tmp_path):
    control = ControlClient(codex_proxy.url)
    session = control.open_session()
    done = run_codex(session, tmp_path, web_search="disabled")
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert done.stdout.strip() == ANSWER

    spans = control.spans(session.rollout_id)
    assert len(spans) == 3
    assert all(s.protocol == "openai.responses" and s.request["stream"] is True for s in spans)
    assert all(s.request["store"] is False and not s.request.get("previous_response_id") for s in spans)
    commands = [json.loads(s.reply_message["tool_calls"][0]["function"]["arguments"])["cmd"] for s in spans[:2]]
    assert commands == ["echo veri-codex-one", "echo veri-codex-two"]
    tool_outputs = [m["content"] for m in spans[2].messages if m["role"] == "tool"]
    assert ["veri-codex-one" in tool_outputs[0], "veri-codex-two" in tool_outputs[1]] == [True, True]
    assert spans[0].messages[0]["role"] == "system" and "Codex" in spans[0].messages[0]["content"]
    assert "exec_command" in [t["function"]["name"] for t in spans[0].tools]
    assert all(s.token_fidelity == "captured" for s in spans)
    assert_bridged_chain(spans)


def test_codex_with_its_default_config_runs_and_the_span_names_the_dropped_tool(codex_proxy, tmp_path):
    """Codex sends its hosted web_search tool unless told not to; the policy cannot run it, so it is
    left out of the prompt (hosted_tools: drop, the default) and the span says so."""
    control = ControlClient(codex_proxy.url)
    session = control.open_session()
    done = run_codex(session, tmp_path, web_search=None)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert done.stdout.strip() == ANSWER
    spans = control.spans(session.rollout_id)
    assert len(spans) == 3
    assert all(s.hosted_tools_dropped == ["web_search"] for s in spans)
    assert "web_search" in [t["type"] for t in spans[0].request["tools"]]
    assert "web_search" not in [t["function"]["name"] for t in spans[0].tools]
    assert_bridged_chain(spans)


def test_codex_under_hosted_tools_refuse_gets_the_proxys_reason(codex_policy, tiny_model, tmp_path):
    """hosted_tools: refuse keeps the 400, which names the tool and the knob; Codex shows the message."""
    args = proxy_args(codex_policy.url, tiny_model, tmp_path / "spans", "--hosted-tools", "refuse")
    with start_server(args) as refusing:
        control = ControlClient(refusing.url)
        session = control.open_session()
        done = run_codex(session, tmp_path, web_search=None)
        assert control.spans(session.rollout_id) == []
    assert done.returncode != 0
    assert "web_search are hosted tools" in done.stderr and "hosted_tools: refuse" in done.stderr, done.stderr
