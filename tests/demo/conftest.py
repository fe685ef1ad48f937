"""Demo fixtures: a real webfixture server, a real policy server whose test-only scripted replies make
the random tiny model do the URL-extraction task, and a real capture proxy in front of it. The bundles
run as plain subprocesses (testkit/demo.py's run_bundle)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.demo import CLAUDE_PAGE, OPENAI_PAGE, SUB_AGENT_PAGE, answer_rule, fetch_rule, sub_agent_rules, tool_call
from testkit.proxy_script import proxy_args
from testkit.servers import RunningServer, start_server
from veri.core.records import SessionInfo
from veri.services.proxy.control_client import ControlClient
from veri.services.webfixture.pages import task


@pytest.fixture(scope="session")
def webfixture() -> Iterator[RunningServer]:
    with start_server(["serve", "webfixture"]) as server:
        yield server


@pytest.fixture(scope="session")
def openai_task(webfixture: RunningServer) -> dict:
    return task(OPENAI_PAGE, base=webfixture.url)


@pytest.fixture(scope="session")
def claude_task(webfixture: RunningServer) -> dict:
    return task(CLAUDE_PAGE, base=webfixture.url)


@pytest.fixture(scope="session")
def sub_agent_task(webfixture: RunningServer) -> dict:
    return task(SUB_AGENT_PAGE, base=webfixture.url)


@pytest.fixture(scope="session")
def demo_policy(tiny_model: Path, openai_task: dict, claude_task: dict, sub_agent_task: dict,
                tmp_path_factory) -> Iterator[RunningServer]:
    # Answer rules first: the tool result (page) is the last user turn then, and it holds no page URL.
    rules = [
        answer_rule(openai_task),
        answer_rule(claude_task),
        fetch_rule(openai_task, tool_call("fetch_url", {"url": openai_task["url"]})),
        fetch_rule(claude_task, tool_call("Bash", {"command": f"curl -s {claude_task['url']}",
                                                   "description": "Fetch the page"})),
        *sub_agent_rules(sub_agent_task),
    ]
    script = tmp_path_factory.mktemp("demo-policy") / "script.json"
    script.write_text(json.dumps(rules))
    with start_server(["serve", "policy", "--model", str(tiny_model), "--scripted-replies", str(script)]) as server:
        yield server


@pytest.fixture(scope="session")
def demo_proxy(demo_policy: RunningServer, tiny_model: Path, tmp_path_factory) -> Iterator[RunningServer]:
    store = tmp_path_factory.mktemp("demo-spans")
    args = proxy_args(demo_policy.url, tiny_model, store)
    args[args.index("--max-tokens") + 1] = "256"  # room for a forced tool call with a URL in it
    with start_server(args) as server:
        yield server


@pytest.fixture
def control(demo_proxy: RunningServer) -> ControlClient:
    return ControlClient(demo_proxy.url)


@pytest.fixture
def session(control: ControlClient) -> SessionInfo:
    return control.open_session()


#END
