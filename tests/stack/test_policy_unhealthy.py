"""A policy that never becomes healthy fails `make train` with the last lines of its log and the file
that holds all of it (not a bare timeout): scripts/stack/up.sh (what make train starts the stack with) on
a two-service project whose `policy` logs a failure and never answers its health check, and whose
`proxy` waits for it, as compose.policy.yaml's proxy does. Real compose, real containers."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.stack.conftest import _compose

pytestmark = pytest.mark.needs("docker")

REPO = Path(__file__).resolve().parents[2]
IMAGE = "veri/os-base"


@pytest.fixture
def project(tmp_path: Path):
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode != 0:
        pytest.skip(f"needs {IMAGE} (make images)")
    name = f"veri-unhealthy-{os.getpid()}"
    yield name
    subprocess.run([*_compose().split(), "-p", name, "-f", str(tmp_path / "compose.json"), "down", "-t", "1"],
                   capture_output=True, timeout=120, env={**os.environ, "VERI_CONTROL_TOKEN": "unused"})


def test_an_unhealthy_policy_ends_up_with_its_log(tmp_path: Path, project: str):
    lines = [f"loading shard {index}" for index in range(40)] + ["torch.OutOfMemoryError: CUDA out of memory"]
    script = "; ".join(f"echo '{line}'" for line in lines) + "; exec sleep 600"
    services = {
        "policy": {"image": IMAGE, "entrypoint": ["/usr/bin/tini", "--"], "command": ["sh", "-c", script],
                   "healthcheck": {"test": ["CMD", "false"], "interval": "1s", "retries": 2, "start_period": "1s"}},
        "proxy": {"image": IMAGE, "entrypoint": ["/usr/bin/tini", "--"], "command": ["sleep", "600"],
                  "depends_on": {"policy": {"condition": "service_healthy"}}},
    }
    (tmp_path / "compose.json").write_text(json.dumps({"services": services}))
    models = tmp_path / "models" / "tiny"
    models.mkdir(parents=True)
    (models / "config.json").write_text("{}")
    state = tmp_path / "state"
    env = {**os.environ, "COMPOSE": _compose(), "COMPOSE_FILE": str(tmp_path / "compose.json"),
           "VERI_PROJECT": project, "VERI_STATE_DIR": str(state), "VERI_MODELS_DIR": str(tmp_path / "models")}
    done = subprocess.run(["scripts/stack/up.sh"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the policy server 'policy' did not become healthy (unhealthy)" in done.stderr, done.stderr
    shown = [line.removeprefix("  | ") for line in done.stderr.splitlines() if line.startswith("  | ")]
    assert shown == lines[-30:]  # the last 30 lines, the error among them
    log = state / "logs" / "policy.log"
    assert f"its whole log: {log}" in done.stderr
    assert log.read_text().splitlines() == lines
