"""Harbor task environments offline (docs/harbor-tasks.md, "Offline builds and verifier tools"): a task's
Dockerfile built with no registry and no internet (apt and pip answered by the build proxy), a bundle's
runtime tree running in a plain image under runsc, and an unmodified cookbook-style test.sh passing with
--network none on veri's verifier tools. The one online step (`veri tasks vendor`) runs once, for a task of
one small .deb and one wheel, into build/ (kept between runs, like make vendor's folder)."""

from __future__ import annotations

from pathlib import Path

import docker
import pytest

from tests.sandbox.conftest import (
    BASE,
    CLAUDE_AGENT,
    CODEX_AGENT,
    LABEL,
    ROOT,
    SESSION,
    claude_code_version,
    unavailable,
)
from veri.tools.tasks.build import TASK_BASE, TaskBuildError, build_tasks
from veri.tools.tasks.layout import RUNTIME_MOUNT, TOOLS_MOUNT
from veri.tools.tasks.runtime import runtime_tree
from veri.tools.tasks.vendor import VendorError, vendor_tasks
from veri.tools.tasks.verifier_tools import verifier_env, verifier_tools

OS_BASE = "veri/os-base"
DOCKERFILE = """FROM ubuntu:24.04
RUN apt-get update && apt-get install -y libjansson4 && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/task && /opt/task/bin/pip install sniffio==1.3.1
WORKDIR /app
"""
# As the Harbor cookbook's tasks write them: apt-get curl, the uv installer from astral.sh, uvx --with pytest.
TEST_SH = """#!/bin/bash
apt-get update
apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.9.7/install.sh | sh
source $HOME/.local/bin/env
uvx --with pytest==8.4.1 pytest /tests/test_state.py -rA
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""
TEST_STATE = """from pathlib import Path

def test_the_answer():
    assert Path("/app/answer.txt").read_text().strip() == "42"
"""


@pytest.fixture(scope="session")
def task(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tasks") / "offline-probe"
    (folder / "environment").mkdir(parents=True)
    (folder / "environment" / "Dockerfile").write_text(DOCKERFILE)
    (folder / "tests").mkdir()
    (folder / "tests" / "test.sh").write_text(TEST_SH)
    (folder / "tests" / "test_state.py").write_text(TEST_STATE)
    return folder


@pytest.fixture(scope="session")
def vendor(task: Path, docker_client: docker.DockerClient) -> Path:
    out = ROOT / "build" / "tasks" / "test-vendor"
    done = out / ".vendored"
    if done.is_file() and done.read_text() == DOCKERFILE + TEST_SH:
        return out
    try:
        vendor_tasks([task], out, log=lambda line: None)
    except VendorError as exc:
        unavailable(f"`veri tasks vendor` needs Debian's mirror and PyPI once: {exc}")
    done.write_text(DOCKERFILE + TEST_SH)
    return out


def run(client: docker.DockerClient, image: str, script: str, **kwargs) -> tuple[int, str]:
    container = client.containers.run(image, ["sh", "-c", script], detach=True, entrypoint=[], runtime="runsc",
                                      network_mode="none", labels={LABEL: SESSION}, **kwargs)
    try:
        status = container.wait(timeout=300)
        return status["StatusCode"], container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)


def test_an_unmapped_from_is_named_with_the_fix_before_any_build(task: Path, docker_client, tmp_path: Path):
    fix = rf"FROM ubuntu:24.04 is not on this machine.*--image-map ubuntu:24.04={TASK_BASE}"
    with pytest.raises(TaskBuildError, match=fix):
        build_tasks([task], tmp_path, client=docker_client, log=lambda line: None)


def test_apt_and_pip_lines_build_offline_from_the_vendored_set(task: Path, vendor: Path, docker_client):
    lines: list[str] = []
    tags = build_tasks([task], vendor, image_map={"ubuntu:24.04": TASK_BASE}, client=docker_client, log=lines.append)
    tag = tags[task]
    assert tag.startswith("veri/task-offline-probe:")
    code, out = run(docker_client, tag, "dpkg-query -W -f='${Status}\\n' libjansson4; "
                                        "/opt/task/bin/python -c 'import sniffio; print(sniffio.__version__)'; pwd")
    assert code == 0, out
    assert out.split() == ["install", "ok", "installed", "1.3.1", "/app"]
    # the same inputs: the same tag, not rebuilt
    again: list[str] = []
    assert build_tasks([task], vendor, image_map={"ubuntu:24.04": TASK_BASE}, client=docker_client,
                       log=again.append) == tags
    assert again == [f"tasks build: {tag} is up to date"]


def test_a_bundles_runtime_tree_runs_in_a_plain_image(docker_client):
    tree = runtime_tree(BASE, client=docker_client, log=lambda line: None)
    assert runtime_tree(BASE, client=docker_client) == tree  # cached by the image id
    code, out = run(docker_client, OS_BASE,
                    f"{RUNTIME_MOUNT}/bin/python3 -c 'import sys, ssl, openai, anthropic; print(sys.prefix, "
                    f"openai.__name__, anthropic.__name__)' && {RUNTIME_MOUNT}/bin/setpriv --version",
                    volumes={str(tree): {"bind": RUNTIME_MOUNT, "mode": "ro"}}, user="65534:65534")  # as nobody
    assert code == 0, out
    assert f"{RUNTIME_MOUNT} openai anthropic" in out and "setpriv from util-linux" in out


@pytest.mark.parametrize("image,program", [(CLAUDE_AGENT, "claude"), (CODEX_AGENT, "codex")])
def test_the_agent_clis_run_from_the_tree_in_a_plain_image(docker_client, image: str, program: str):
    # Claude Code through the tree's loader (patchelf would break its payload), Codex as is (static)
    tree = runtime_tree(image, client=docker_client, log=lambda line: None)
    code, out = run(docker_client, OS_BASE, f"{RUNTIME_MOUNT}/bin/{program} --version",
                    volumes={str(tree): {"bind": RUNTIME_MOUNT, "mode": "ro"}})
    assert code == 0, out
    assert (claude_code_version() in out) if program == "claude" else out.startswith("codex-cli ")


@pytest.mark.parametrize("answer,reward", [("42", "1"), ("41", "0")])
def test_a_cookbook_test_sh_runs_offline_on_the_verifier_tools(task: Path, vendor: Path, docker_client, answer, reward):
    tree, tools = runtime_tree(BASE, client=docker_client, log=lambda line: None), verifier_tools(vendor)
    env = verifier_env(scratch="/tmp/veri-verify")
    code, out = run(docker_client, OS_BASE,
                    f"mkdir -p /tmp/veri-verify/home /app && echo {answer} >/app/answer.txt && cd /app && "
                    "bash /tests/test.sh; echo reward=$(cat /logs/verifier/reward.txt)",
                    environment=env, tmpfs={"/logs/verifier": ""},
                    volumes={str(tree): {"bind": RUNTIME_MOUNT, "mode": "ro"},
                             str(tools): {"bind": TOOLS_MOUNT, "mode": "ro"},
                             str(task / "tests"): {"bind": "/tests", "mode": "ro"}})
    assert code == 0, out
    assert "apt-get update skipped" in out and "(vendored, offline)" in out
    assert out.strip().endswith(f"reward={reward}"), out
