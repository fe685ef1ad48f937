"""`veri run-harness --task-dir`: the harbor_bash bundle (an OpenAI-SDK loop with a bash tool) runs inside a
CPU demo task's own image under runsc, from the bundle's runtime tree (/veri/rt/bin/python3, its code at
/veri/rt/harness), through a capture proxy to the tiny model, and each rollout is scored by the task's
tests. The proxy and policy are the reliability bench's (bench/reliability/scenarios/harness_faults.py);
the task is network_mode = "no-network", so its sandbox sits on the sealed network with the proxy alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.reliability.scenarios.harness_faults import NETWORK, faults_stack
from tests.sandbox.conftest import ROOT
from tests.sandbox.test_tasks_oracle import MAP, vendor  # noqa: F401 - the shared vendored set (a fixture)
from veri.cli import main
from veri.core.rollout_record import RolloutRecord
from veri.services.launcher.docker_backend import ensure_rollouts_network
from veri.services.launcher.docker_egress import network_names

pytestmark = pytest.mark.slow
TASK = ROOT / "config/data/harbor_cpu/train/copy-apple-to-violet"


def test_a_group_runs_in_the_tasks_image_and_is_verified(docker_client, tiny_model: Path, tmp_path: Path,
                                                           vendor: Path, capsys, monkeypatch):  # noqa: F811
    sealed = ensure_rollouts_network(docker_client, network_names(NETWORK)["none"])
    with faults_stack(docker_client, tiny_model, tmp_path) as stack:
        sealed.connect(stack.proxy_container)  # a no-network task's sandbox reaches the proxy and nothing else
        monkeypatch.setenv("VERI_ROLLOUTS_NETWORK", NETWORK)
        monkeypatch.setenv("VERI_CONTROL_TOKEN", stack.token)
        code = main(["run-harness", "--bundle", str(ROOT / "harness-bundles/harbor_bash"), "--task-dir", str(TASK),
                     "-n", "2", "--out", str(tmp_path / "out"), "--proxy-url", stack.proxy_url, "--no-up",
                     "--max-turns", "2", "--timeout", "120", "--vendor", str(vendor), *MAP])
    out = capsys.readouterr().out
    assert code == 0, out
    files = sorted((tmp_path / "out/task-0").glob("*.json"))
    records = [RolloutRecord.model_validate_json(path.read_text()) for path in files]
    assert len(records) == 2, out
    for record in records:
        # The agent reached the policy from inside the task's image: its Python and the openai SDK are the tree's.
        assert record.spans, (record.status, record.episode.verdicts, out)
        assert json.loads(json.dumps(record.task))["harbor_task"] == str(TASK.resolve())
    # The tiny model does not solve the task; the tests ran and said so (a number, not a missing reward).
    assert out.count("verifier reward: 0") == 2, out
    assert "tokens p/c/env" in out
