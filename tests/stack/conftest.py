"""The whole compose stack, started with `make up` as a user does (its own project, network, port
and state folder, so it never collides with a user's stack), with test-only scripted replies that
make the random tiny model do the URL-extraction task."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.demo.conftest import answer_rule, fetch_rule, tool_call
from tests.servers import free_port

REPO = Path(__file__).resolve().parents[2]
DATASET = REPO / "config" / "data" / "url_extract.jsonl"
OPENAI_TASK, CLAUDE_TASK, CODEX_TASK = 5, 9, 13


def dataset_row(index: int) -> dict:
    return json.loads(DATASET.read_text().splitlines()[index])


@dataclass
class Stack:
    env: dict[str, str]
    proxy_url: str
    state: Path

    @property
    def control_token(self) -> str:
        return (self.state / "control_token").read_text().strip()

    def veri(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        # VERI_TEST_HOST_SECRET: a host variable no sandbox may ever see.
        env = {**self.env, "VERI_CONTROL_TOKEN": self.control_token, "VERI_TEST_HOST_SECRET": "do-not-leak"}
        return subprocess.run([str(REPO / ".venv" / "bin" / "veri"), *args], cwd=REPO, capture_output=True,
                              text=True, timeout=timeout, env=env)


def _compose() -> str:
    done = subprocess.run(["make", "--no-print-directory", "-s", "-f", "Makefile", "-f", "-", "print-compose"],
                          cwd=REPO, input="print-compose:\n\t@echo $(COMPOSE)\n", capture_output=True, text=True)
    return done.stdout.strip()


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    state = tmp_path_factory.mktemp("stack-state")
    claude_row = dataset_row(CLAUDE_TASK)
    rows = [json.loads(line) for line in DATASET.read_text().splitlines()]
    # Every task: fetch the page, then answer. Answer rules first: the page is the last turn then.
    rules = [answer_rule(row) for row in rows]
    rules.append(fetch_rule(claude_row, tool_call("Bash", {"command": f"curl -s {claude_row['url']}",
                                                            "description": "Fetch the page"})))
    codex_row = dataset_row(CODEX_TASK)
    rules.append(fetch_rule(codex_row, tool_call("exec_command", {"cmd": f"curl -s {codex_row['url']}"})))
    rules += [fetch_rule(row, tool_call("fetch_url", {"url": row["url"]})) for row in rows]
    (state / "script.json").write_text(json.dumps(rules))
    port = free_port()
    project = f"veri-test-{os.getpid()}"
    env = {**os.environ, "VERI_PROJECT": project, "VERI_STATE_DIR": str(state), "VERI_PROXY_PORT": str(port),
           "VERI_CONSOLE_PORT": str(free_port()),
           "VERI_ROLLOUTS_NETWORK": f"{project}-rollouts",
           "VERI_POLICY_SCRIPTED_REPLIES": "/state/script.json", "VERI_PROXY_URL": f"http://127.0.0.1:{port}"}
    up = subprocess.run(["make", "--no-print-directory", "up"], cwd=REPO, env=env, capture_output=True, text=True,
                        timeout=1800)
    try:
        assert up.returncode == 0, f"make up failed:\n{up.stdout[-3000:]}\n{up.stderr[-5000:]}"
        yield Stack(env=env, proxy_url=f"http://127.0.0.1:{port}", state=state)
    finally:
        subprocess.run(["make", "--no-print-directory", "down"], cwd=REPO, env=env, capture_output=True, timeout=300)
