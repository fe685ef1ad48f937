"""Fixtures for the sandbox tests: a real dockerd with the runsc (gVisor) runtime and the images that
`make images` builds. Where they are missing the tests skip with what to run — except under CI
(CI=true) or VERI_REQUIRE_SANDBOX=1, where a missing sandbox is a failure, not a skip."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from tests import tiers

ROOT = Path(__file__).resolve().parents[2]
PREFIX = os.environ.get("IMAGE_PREFIX", "veri")
BASE = f"{PREFIX}/base"
CLAUDE_AGENT = f"{PREFIX}/base-claude-agent"
CODEX_AGENT = f"{PREFIX}/base-codex-agent"
RUNTIME = f"{PREFIX}/runtime"
LABEL = "org.veri.test"
# This pytest session's value of LABEL: its teardown sweeps only its own containers, never those of a
# test session or reliability run that shares the daemon.
SESSION = f"session-{uuid.uuid4().hex[:12]}"


def _required() -> bool:
    return os.environ.get("CI") == "true" or os.environ.get("VERI_REQUIRE_SANDBOX") == "1"


def unavailable(why: str) -> None:
    if _required():
        pytest.fail(f"sandbox unavailable: {why}", pytrace=False)
    pytest.skip(f"sandbox unavailable: {why}")


def makefile_version(name: str) -> str:
    """A pinned version, from the Makefile (its one home)."""
    match = re.search(rf"^{name}\s*:?=\s*(\S+)", (ROOT / "Makefile").read_text(), re.M)
    assert match, f"{name} not found in the Makefile"
    return match.group(1)


def claude_code_version() -> str:
    return makefile_version("CLAUDE_CODE_VERSION")


@pytest.fixture(scope="session")
@tiers.fixture_needs("docker")
def docker_client() -> Iterator[docker.DockerClient]:
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure here means "no daemon"
        unavailable(f"no Docker daemon ({exc}); run `make docker`")
    if "runsc" not in client.info().get("Runtimes", {}):
        unavailable("dockerd has no runsc runtime; run `make docker`")
    for image in (BASE, CLAUDE_AGENT, CODEX_AGENT, RUNTIME):
        try:
            client.images.get(image)
        except docker.errors.ImageNotFound:
            # veri/base-claude-agent is built apart (Claude Code's terms: docs/licences.md)
            target = "images-claude-agent" if image == CLAUDE_AGENT else "images"
            unavailable(f"image {image} is missing; run `make {target}`")
    yield client
    for container in client.containers.list(all=True, filters={"label": f"{LABEL}={SESSION}"}):
        container.remove(force=True)
    client.close()


@dataclass
class Result:
    exit_code: int
    output: str
    oom_killed: bool


@pytest.fixture
def run_sandboxed(docker_client: docker.DockerClient) -> Callable[..., Result]:
    """Run one command to completion in a gVisor container as the non-root `harness` user (the
    way the launcher runs a rollout) and return its exit code and output."""

    def run(image: str, command: list[str], timeout: float = 120, **kwargs) -> Result:
        options = dict(runtime="runsc", user="harness", network_mode="none", pids_limit=4096)
        options.update(kwargs)
        container = docker_client.containers.run(
            image, command, detach=True, labels={LABEL: SESSION}, name=f"veri-test-{uuid.uuid4().hex[:10]}",
            **options,
        )
        try:
            status = container.wait(timeout=timeout)
            container.reload()
            return Result(
                exit_code=status["StatusCode"],
                output=container.logs().decode(errors="replace"),
                oom_killed=bool(container.attrs["State"].get("OOMKilled")),
            )
        finally:
            container.remove(force=True)

    return run
