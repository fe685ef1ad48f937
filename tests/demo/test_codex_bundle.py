"""The Codex bundle (harness-bundles/url_extract_codex) end to end without docker: `codex exec` runs
unmodified as the bundle's entrypoint starts it, with the exact rollout environment, against a real
webfixture, capture proxy (Responses route) and scripted policy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.demo import (
    BUNDLES,
    CODEX_PAGE,
    answer_rule,
    fetch_rule,
    image_bin,
    proxy_with_max_tokens,
    run_bundle,
    tool_call,
)
from testkit.servers import RunningServer, start_server
from tests.demo.test_bundles import load_agent
from tests.proxy.conftest import assert_bridged_chain
from veri.core.harness import load_manifest
from veri.core.records import SessionInfo
from veri.services.proxy.control_client import ControlClient
from veri.services.webfixture.pages import task


@pytest.fixture(scope="module")
def codex_task(webfixture: RunningServer) -> dict:
    return task(CODEX_PAGE, base=webfixture.url)


@pytest.fixture(scope="module")
def codex_policy(tiny_model: Path, codex_task: dict, tmp_path_factory) -> Iterator[RunningServer]:
    rules = [answer_rule(codex_task),
             fetch_rule(codex_task, tool_call("exec_command", {"cmd": f"curl -s {codex_task['url']}"}))]
    script = tmp_path_factory.mktemp("codex-demo") / "script.json"
    script.write_text(json.dumps(rules))
    with start_server(["serve", "policy", "--model", str(tiny_model), "--scripted-replies", str(script)]) as policy:
        yield policy


@pytest.fixture(scope="module")
def codex_proxy(codex_policy: RunningServer, tiny_model: Path, tmp_path_factory) -> Iterator[RunningServer]:
    # Room for a forced tool call with a URL in it.
    with proxy_with_max_tokens(codex_policy, tiny_model, tmp_path_factory.mktemp("spans"), 256) as proxy:
        yield proxy


@pytest.fixture
def control(codex_proxy: RunningServer) -> ControlClient:
    return ControlClient(codex_proxy.url)


@pytest.fixture
def session(control: ControlClient) -> SessionInfo:
    return control.open_session()


def test_manifest_and_answer_parsing():
    manifest = load_manifest(BUNDLES / "url_extract_codex")
    assert (manifest.name, manifest.base_image, manifest.protocol, manifest.entrypoint) == (
        "url_extract_codex", "veri/base-codex-agent", "openai", ["python", "agent.py"])
    agent = load_agent("url_extract_codex")
    assert agent.parse_answer("The link is below.\nANSWER: <https://a.test/x?plan=team>.") == "https://a.test/x?plan=team"
    assert agent.parse_answer("no answer") is None
    config = agent.codex_config("http://proxy:8000/r/r-1/v1", 'odd "model"')
    assert 'base_url = "http://proxy:8000/r/r-1/v1"' in config and 'model = "odd \\"model\\""' in config
    assert 'wire_api = "responses"' in config and 'web_search = "disabled"' in config


@pytest.mark.needs("docker")
@pytest.mark.slow
def test_codex_bundle_extracts_the_url(codex_proxy, session, control, codex_task, tmp_path):
    run = run_bundle("url_extract_codex", proxy=codex_proxy, session=session, row=codex_task, tmp_path=tmp_path)
    assert run.returncode == 0, run.explain()
    assert run.answer() == codex_task["expected_url"]
    assert f"ANSWER: {codex_task['expected_url']}" in run.stdout
    events = [json.loads(line) for line in (run.output_dir / "codex-events.jsonl").read_text().splitlines()]
    assert events[-1]["type"] == "turn.completed"

    first, second = control.spans(session.rollout_id)
    [call] = first.reply_message["tool_calls"]
    assert call["function"]["name"] == "exec_command"
    assert json.loads(call["function"]["arguments"]) == {"cmd": f"curl -s {codex_task['url']}"}
    [page] = [m["content"] for m in second.messages if m["role"] == "tool"]
    assert f'href="{codex_task["expected_url"]}"' in page
    assert second.response["status"] == "completed" and second.response["output"][-1]["type"] == "message"
    assert_bridged_chain([first, second])
    # The base URL the bundle gave Codex is the rollout's Responses route.
    assert first.path == "/v1/responses" and first.request["model"] == "policy"


@pytest.mark.needs("docker")
@pytest.mark.slow
def test_codex_bundle_fails_on_model_api_errors(codex_proxy, session, codex_task, tmp_path):
    run = run_bundle("url_extract_codex", proxy=codex_proxy, session=session, row=codex_task, tmp_path=tmp_path,
                     rollout_id="r-unknown", timeout_s=180)
    assert run.returncode == 1, run.explain()
    assert "codex exec exited" in run.stderr and "unknown rollout" in run.stderr, run.explain()
    assert not (run.output_dir / "answer.txt").exists()


@pytest.mark.needs("docker")
@pytest.mark.slow
def test_a_reply_cut_at_max_tokens_is_a_finished_rollout(codex_policy, tiny_model, codex_task, tmp_path):
    """Codex stops on a response.incomplete; the bundle reports a finished rollout with no answer."""
    with proxy_with_max_tokens(codex_policy, tiny_model, tmp_path / "spans", 4) as short:
        control = ControlClient(short.url)
        session = control.open_session()
        run = run_bundle("url_extract_codex", proxy=short, session=session, row=codex_task, tmp_path=tmp_path)
        [span] = control.spans(session.rollout_id)
    assert run.returncode == 0, run.explain()
    assert run.answer() == "" and "codex stopped on a reply cut at max_tokens" in run.stderr
    assert span.finish_reason == "length" and span.response["status"] == "incomplete"


DEFAULT_CONFIG_BUNDLE = Path(__file__).parent / "codex_default_config"


def veri(*args: str, path: list[str], timeout_s: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": os.pathsep.join([*path, os.environ["PATH"]]), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "veri.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout_s)


@pytest.mark.needs("docker")
@pytest.mark.slow
def test_codex_with_its_default_config_runs_and_says_what_was_dropped(codex_proxy, codex_task, tmp_path):
    """Codex sends its hosted web_search tool (its config does not turn it off): the proxy leaves it out
    of the prompt, the rollout finishes, and run-harness and veri debug say which tool was dropped."""
    task = {"prompt": f"Reply with ANSWER: {codex_task['expected_url']}", "expected_url": codex_task["expected_url"]}
    out, path = tmp_path / "out", image_bin("veri/base-codex-agent", tmp_path)
    run = veri("run-harness", "--bundle", str(DEFAULT_CONFIG_BUNDLE), "--task", json.dumps(task), "--sandbox",
               "local", "--proxy-url", codex_proxy.url, "--no-up", "--out", str(out), path=path)
    said = " ".join(run.stdout.split())
    assert run.returncode == 0, run.stdout + run.stderr
    assert "completed (0)" in said and codex_task["expected_url"] in said, said
    assert "rollout 0: hosted tools dropped from the prompt: web_search (1 of 1 spans)" in said, said
    assert "web_search = \"disabled\"" in said and "hosted_tools: refuse" in said

    record_file = out / "task-0" / "rollout-0.json"
    [span] = json.loads(record_file.read_text())["spans"]
    assert span["hosted_tools_dropped"] == ["web_search"]
    assert "web_search" in [tool["type"] for tool in span["request"]["tools"]]
    assert "web_search" not in [tool["function"]["name"] for tool in span["tools"]]

    explained = veri("debug", str(record_file), path=[])
    assert explained.returncode == 0, explained.stderr
    assert "      hosted tools dropped from the prompt: web_search\n" in explained.stdout
    assert "hosted tools dropped from the prompt: web_search (1 of 1 spans): the policy cannot run them" in (
        explained.stdout)
