"""harness-bundles/harbor_claude (Claude Code as the agent for Harbor tasks) on a CPU-demo task, end to end
without docker: the entrypoint runs as a plain subprocess from a folder standing in for the task's WORKDIR,
against a real capture proxy and the scripted policy, which makes Claude Code hand the task to a sub-agent
whose Bash command writes the answer there."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.demo import (
    BUNDLES,
    COMMAND_DONE,
    HARBOR_SUB_AGENT_BRIEF,
    HARBOR_TASK,
    SUB_AGENT_REPORT,
    harbor_sub_agent_rules,
    run_in_workdir,
)
from testkit.proxy_script import proxy_args
from testkit.servers import RunningServer, start_server
from veri.core.dataset import harbor_row
from veri.core.episodes import RowKind, build_episode
from veri.core.harbor_task import load_task
from veri.core.harness import load_manifest
from veri.core.records import SessionInfo
from veri.services.proxy.control_client import ControlClient

ROW = harbor_row(load_task(HARBOR_TASK))  # its prompt: "Create the file /app/answer.txt containing ... `apple`."
# /app is the task image's WORKDIR; here the agent's working directory stands in for it.
COMMAND = f"echo apple > answer.txt && echo {COMMAND_DONE}"


def load_agent():
    spec = importlib.util.spec_from_file_location("agent_harbor_claude", BUNDLES / "harbor_claude/agent.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def harbor_proxy(tiny_model: Path, tmp_path_factory) -> Iterator[RunningServer]:
    script = tmp_path_factory.mktemp("harbor-policy") / "script.json"
    script.write_text(json.dumps(harbor_sub_agent_rules(ROW["prompt"].strip(), COMMAND)))
    with start_server(["serve", "policy", "--model", str(tiny_model), "--scripted-replies", str(script)]) as policy:
        args = proxy_args(policy.url, tiny_model, tmp_path_factory.mktemp("harbor-spans"))
        args[args.index("--max-tokens") + 1] = "256"  # room for a forced tool call
        with start_server(args) as proxy:
            yield proxy


@pytest.fixture
def harbor_control(harbor_proxy: RunningServer) -> ControlClient:
    return ControlClient(harbor_proxy.url)


@pytest.fixture
def harbor_session(harbor_control: ControlClient) -> SessionInfo:
    return harbor_control.open_session()


def test_manifest():
    bundle = load_manifest(BUNDLES / "harbor_claude")
    assert (bundle.name, bundle.base_image, bundle.protocol, bundle.entrypoint) == (
        "harbor_claude", "veri/base-claude-agent", "anthropic", ["python", "agent.py"])


@pytest.mark.parametrize(("task_input", "prompt"), [
    ("Create the file /app/a.txt.", "Create the file /app/a.txt."),
    ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "One."},
      {"role": "user", "content": "Two."}], "One.\n\nTwo."),
])
def test_task_prompt(task_input, prompt):
    assert load_agent().task_prompt(json.dumps(task_input)) == prompt


@pytest.mark.parametrize("task_input", ["", [{"role": "system", "content": "no user turn"}], {"prompt": "x"}])
def test_task_prompt_refuses_an_unusable_task(task_input):
    with pytest.raises(ValueError):
        load_agent().task_prompt(json.dumps(task_input))


def test_rules_need_the_marker():
    with pytest.raises(ValueError, match=COMMAND_DONE):
        harbor_sub_agent_rules("apple", "echo apple > answer.txt")


@pytest.mark.needs("docker")
@pytest.mark.slow
def test_claude_does_a_harbor_task_through_a_sub_agent(harbor_proxy, harbor_session, harbor_control, tmp_path):
    """Claude Code, run from the task's working directory, hands the task to a sub-agent (its Agent tool); the
    sub-agent's Bash command writes the answer file there. The spans hold the main agent's and the
    sub-agent's calls: a `main` row and a `sub_agent` row, every span in one row."""
    workdir = tmp_path / "app"
    workdir.mkdir()
    run = run_in_workdir("harbor_claude", proxy=harbor_proxy, session=harbor_session, row=ROW, workdir=workdir,
                         tmp_path=tmp_path)
    assert run.returncode == 0, run.explain()
    assert (workdir / "answer.txt").read_text().strip() == "apple", run.explain()
    result = json.loads((run.output_dir / "claude-result.json").read_text())
    assert result["is_error"] is False and result["result"] == "Done: the sub-agent did the task.", result
    assert "Done: the sub-agent did the task." in run.stdout
    assert not (run.output_dir / "answer.txt").exists()  # the task's tests judge the work, not an answer

    spans = harbor_control.spans(harbor_session.rollout_id)
    calls = [span for span in spans if span.path == "/v1/messages"]
    [agent] = [block for block in calls[0].response["content"] if block["type"] == "tool_use"]
    assert agent["name"] == "Agent" and agent["input"]["prompt"].startswith(HARBOR_SUB_AGENT_BRIEF)
    tool_uses = [block for span in calls for block in span.response["content"] if block["type"] == "tool_use"]
    [bash] = [block for block in tool_uses if block["name"] == "Bash"]
    assert bash["input"]["command"] == COMMAND
    sub_agent = [span for span in calls if HARBOR_SUB_AGENT_BRIEF in json.dumps(span.messages[:2])]
    assert any(SUB_AGENT_REPORT in json.dumps(span.response["content"]) for span in sub_agent)

    episode = build_episode(spans, exit_code=0)
    kinds = sorted(branch.kind for branch in episode.branches)
    assert episode.chain_kind == RowKind.MAIN and RowKind.SUB_AGENT in kinds
    assert set(kinds) <= {RowKind.SUB_AGENT, RowKind.SIDE_CALL}  # Claude Code's side calls, if it makes any
    in_rows = [*episode.chain, *(index for branch in episode.branches for index in branch.spans)]
    assert sorted(in_rows) == sorted(span.request_index for span in spans)  # each span in one row
    assert all(span.token_fidelity == "captured" for span in calls)


@pytest.mark.needs("docker")
@pytest.mark.slow
def test_harbor_claude_fails_on_model_api_errors(harbor_proxy, harbor_session, tmp_path):
    # An unknown rollout (404): Claude Code gives up at once (it retries a 401 for minutes).
    workdir = tmp_path / "app"
    workdir.mkdir()
    unknown = harbor_session.model_copy(update={"rollout_id": "r-unknown"})
    run = run_in_workdir("harbor_claude", proxy=harbor_proxy, session=unknown, row=ROW, workdir=workdir,
                         tmp_path=tmp_path, timeout_s=120)
    assert run.returncode == 1, run.explain()
    assert "Claude Code failed (api_error)" in run.stderr, run.explain()
    assert not list(workdir.iterdir())


@pytest.mark.needs("process")
def test_harbor_claude_fails_without_claude_code(tmp_path):
    env = {"PATH": str(Path(sys.executable).parent), "HOME": str(tmp_path), "VERI_TASK_INPUT": json.dumps("Do it."),
           "VERI_MAX_TURNS": "2", "VERI_OUTPUT_DIR": str(tmp_path / "output")}
    done = subprocess.run([sys.executable, str(BUNDLES / "harbor_claude/agent.py")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "cannot run Claude Code" in done.stderr, done.stderr
    assert not (tmp_path / "output/claude-result.json").exists()
    assert os.listdir(tmp_path / "output") == []
