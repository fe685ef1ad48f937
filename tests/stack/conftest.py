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

from testkit.demo import COMMAND_DONE, answer_rule, fetch_rule, harbor_sub_agent_rules, tool_call
from testkit.servers import free_port

REPO = Path(__file__).resolve().parents[2]
DATASET = REPO / "config" / "data" / "url_extract.jsonl"
OPENAI_TASK, CLAUDE_TASK, CODEX_TASK = 5, 9, 13
# The Harbor task of tests/stack/harbor_job/ (harbor_bash, on the kubelet stack: tests/kubernetes): its
# instruction answered with its solution, in the agent's format (a ```bash block it runs in the task's sandbox).
HARBOR_RULE = {"if_last_user_turn_contains": "containing exactly the word `apple`",
               "reply": "```bash\necho apple > /app/answer.txt\n```"}
# The Harbor task of tests/stack/harbor_claude_job/ (test_train_harbor.py): Claude Code hands it to a sub-agent,
# whose Bash command is its solution.
HARBOR_CLAUDE_RULES = harbor_sub_agent_rules("containing exactly the word `cloud`",
                                             f"echo cloud > /app/answer.txt && echo {COMMAND_DONE}")


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


# `make test-compose-v2` runs these again under Docker Compose v2 (`-m compose_smoke`), on a host whose
# suite ran with bookworm's v1: what differs between the two is the CLI (`docker compose` vs
# `docker-compose`), container names and labels, healthcheck / depends_on gating, `run`'s signal and
# exit-code relaying, and `down`. The rest of tests/stack checks the product over a started stack
# (isolation, bundles, vLLM) the same way under either: v1's full pass covers it.
COMPOSE_SMOKE = {
    # make up (the session stack: project name, `ps -q`, healthchecks), one rollout on its network, make down
    "test_run_harness.py::test_openai_bundle_in_gvisor",
    # make up on a running stack keeps it; make down; make up again with a fresh token
    "test_security.py::test_make_down_and_up_rotates_the_control_token",
    # depends_on service_healthy on a policy that never gets healthy: up.sh reports its log
    "test_policy_unhealthy.py::test_an_unhealthy_policy_ends_up_with_its_log",
    # make down / make logs parse the compose files with the default relative paths
    "test_make_down.py::test_default_paths_are_accepted[down]",
    "test_make_down.py::test_default_paths_are_accepted[logs]",
    # make train: `compose run --rm --name trainer` to the end, its exit status and the archive
    "test_train.py::test_make_train_tiny_moves_the_weights_and_writes_a_consistent_archive",
    # Ctrl-C on make train: v1 and v2 relay the signal differently (scripts/stack/train.sh)
    "test_train_interrupt.py::test_ctrl_c_stops_make_train_and_leaves_nothing_running",
    # user, capabilities, tmpfs and mounts as each turns compose.yaml (its YAML merges included) into containers
    "test_privileges.py::test_every_container_holds_only_what_its_allowlist_says",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    found = set()
    for item in items:
        if Path(item.path).parent == here:
            name = f"{Path(item.path).name}::{item.name}"
            if name in COMPOSE_SMOKE:
                item.add_marker(pytest.mark.compose_smoke)
                found.add(name)
    if config.getoption("markexpr") == "compose_smoke" and found != COMPOSE_SMOKE:
        raise pytest.UsageError(f"tests/stack/conftest.py COMPOSE_SMOKE names tests that are gone: "
                                f"{sorted(COMPOSE_SMOKE - found)}")


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
    rules = list(HARBOR_CLAUDE_RULES)  # first: its sub-agent's brief and report hold no other rule's text
    rules += [answer_rule(row) for row in rows]
    rules.append(fetch_rule(claude_row, tool_call("Bash", {"command": f"curl -s {claude_row['url']}",
                                                            "description": "Fetch the page"})))
    codex_row = dataset_row(CODEX_TASK)
    rules.append(fetch_rule(codex_row, tool_call("exec_command", {"cmd": f"curl -s {codex_row['url']}"})))
    rules += [fetch_rule(row, tool_call("fetch_url", {"url": row["url"]})) for row in rows]
    rules.append(HARBOR_RULE)
    (state / "jobs").mkdir()  # the policy sees only the state folder's jobs/ (read-only)
    (state / "jobs" / "script.json").write_text(json.dumps(rules))
    port = free_port()
    project = f"veri-test-{os.getpid()}"
    env = {**os.environ, "VERI_PROJECT": project, "VERI_STATE_DIR": str(state), "VERI_PROXY_PORT": str(port),
           "VERI_CONSOLE_PORT": str(free_port()),
           "VERI_ROLLOUTS_NETWORK": f"{project}-rollouts",
           "VERI_POLICY_SCRIPTED_REPLIES": "/state/jobs/script.json", "VERI_PROXY_URL": f"http://127.0.0.1:{port}"}
    up = subprocess.run(["make", "--no-print-directory", "up"], cwd=REPO, env=env, capture_output=True, text=True,
                        timeout=1800)
    try:
        assert up.returncode == 0, f"make up failed:\n{up.stdout[-3000:]}\n{up.stderr[-5000:]}"
        yield Stack(env=env, proxy_url=f"http://127.0.0.1:{port}", state=state)
    finally:
        subprocess.run(["make", "--no-print-directory", "down"], cwd=REPO, env=env, capture_output=True, timeout=300)


TRAIN_JOB = "tests/stack/train_job/job.yaml"


@pytest.fixture(scope="session")
def trained(stack: Stack) -> tuple[str, subprocess.CompletedProcess]:
    """One `make train` run on the session stack, shared: its job folder is what the archive and console
    tests read (test_train.py), its stack what test_privileges.py inspects. The job: tests/stack/train_job/."""
    name = f"ci-{os.getpid()}"
    done = subprocess.run(["make", "--no-print-directory", "train", f"CONFIG={TRAIN_JOB}", f"NAME={name}"],
                          cwd=REPO, env=stack.env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, f"{done.stdout[-5000:]}\n{done.stderr[-5000:]}"
    return name, done
