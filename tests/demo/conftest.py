"""Demo fixtures: a real webfixture server, a real policy server whose test-only scripted replies make
the random tiny model do the URL-extraction task, and a real capture proxy in front of it.

Bundles run as plain subprocesses (no docker) from their folder, with exactly `rollout_env(...)` plus
the PATH and HOME their image would provide.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from testkit.servers import RunningServer, start_server
from tests.claude_code import claude_binary
from tests.codex import codex_binary
from tests.proxy.conftest import proxy_args
from veri.core.harness import load_manifest, rollout_env
from veri.core.records import SessionInfo
from veri.services.proxy.control_client import ControlClient
from veri.services.webfixture.pages import task

REPO = Path(__file__).resolve().parents[2]
BUNDLES = REPO / "harness-bundles"
OPENAI_PAGE = 3  # the task the OpenAI-bundle tests run
CLAUDE_PAGE = 6  # the task the Claude-bundle tests run
SUB_AGENT_PAGE = 11  # the task Claude Code hands to a sub-agent (its Agent tool)
SUB_AGENT_BRIEF = "Sub-agent brief"  # how the scripted policy tells the sub-agent's first turn from the main one's


def fetch_rule(row: dict, reply: str) -> dict:
    return {"if_last_user_turn_contains": row["url"], "reply": reply}


def answer_rule(row: dict) -> dict:
    """Once the page is in the last turn (the tool's result), answer with the link it asks for."""
    return {"if_last_user_turn_contains": row["expected_url"], "reply": f"ANSWER: {row['expected_url']}"}


def tool_call(name: str, arguments: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def sub_agent_rules(row: dict) -> list[dict]:
    """Claude Code on `row` starts a sub-agent with its Agent tool (in the foreground: its result comes
    back as the tool result); the sub-agent fetches the page with Bash and answers; so does the main agent
    once that answer is its tool result. The answer rule first: both last turns that hold the link."""
    brief = f"{SUB_AGENT_BRIEF}: fetch {row['url']} with `curl -s` and report the URL of the link asked for."
    agent = {"description": "Fetch the page", "subagent_type": "general-purpose", "run_in_background": False,
             "prompt": brief}
    return [answer_rule(row),
            {"if_last_user_turn_contains": SUB_AGENT_BRIEF,
             "reply": tool_call("Bash", {"command": f"curl -s {row['url']}", "description": "Fetch the page"})},
            fetch_rule(row, tool_call("Agent", agent))]


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


@dataclass
class BundleRun:
    returncode: int
    stdout: str
    stderr: str
    output_dir: Path

    def answer(self) -> str:
        return (self.output_dir / "answer.txt").read_text().strip()

    def explain(self) -> str:
        return f"exit {self.returncode}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"


def image_bin(base_image: str, tmp_path: Path) -> list[str]:
    """The folder where a base image's CLI is (`claude` or `codex`, in /usr/local/bin there): the
    host's pinned binary linked into tmp_path/bin; none for the other bases."""
    cli = {"veri/base-claude-agent": ("claude", claude_binary), "veri/base-codex-agent": ("codex", codex_binary)}
    if base_image not in cli:
        return []
    program, binary = cli[base_image]
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    if not (folder / program).exists():
        (folder / program).symlink_to(binary())
    return [str(folder)]


def proxy_with_max_tokens(policy: RunningServer, model: Path, store: Path, max_tokens: int, *extra: str):
    """A capture proxy of its own whose job caps each model call at `max_tokens`."""
    args = proxy_args(policy.url, model, store, *extra)
    args[args.index("--max-tokens") + 1] = str(max_tokens)
    return start_server(args)


def run_bundle(name: str, *, proxy: RunningServer, session: SessionInfo, row: dict, tmp_path: Path,
               max_turns: int = 4, api_key: str | None = None, rollout_id: str | None = None,
               timeout_s: float = 300) -> BundleRun:
    """Run a bundle's entrypoint once, the way a sandbox would, but as a local subprocess."""
    bundle = BUNDLES / name
    manifest = load_manifest(bundle)
    output_dir = tmp_path / "output"
    home = tmp_path / "home"
    home.mkdir()
    env = rollout_env(
        proxy_base_url=proxy.url, rollout_id=rollout_id or session.rollout_id, api_key=api_key or session.api_key,
        model="policy", task=row, task_index=row["page"], rollout_index=0, max_turns=max_turns,
        output_dir=str(output_dir),
    )
    # What the image itself provides: `python` (veri/base's venv; here the test venv), the CLI, a HOME.
    path = [str(Path(sys.executable).parent), *image_bin(manifest.base_image, tmp_path), "/usr/local/bin", "/usr/bin",
            "/bin"]
    env.update(PATH=os.pathsep.join(path), HOME=str(home))
    process = subprocess.Popen(manifest.entrypoint, cwd=bundle, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the harness and anything it started (claude)
        process.communicate()
        raise
    return BundleRun(process.returncode, stdout, stderr, output_dir)
