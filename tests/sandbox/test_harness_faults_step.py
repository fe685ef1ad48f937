"""The harness faults (docs/reliability.md), CI-sized: one `veri train` step of 12 rollouts through the launcher service
(docker backend, runsc) mixing crashing, hanging, forking, memory-hogging, output-spamming and healthy
harnesses (tests/sandbox/bundles/harness_faults). Every rollout gets its status and rules, the healthy
ones are trained, nothing escapes its sandbox, no span is lost, the proxy answers no 5xx and the
launcher stays small. The same step with 64 rollouts is `make reliability` (bench/reliability/scenarios/
harness_faults.py, which holds the mix, the stack and the checks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.reliability.scenarios.harness_faults import build_image, faults_stack, run_step

pytestmark = pytest.mark.slow


def test_one_step_of_every_harness_fault(docker_client, tiny_model: Path, tmp_path: Path):
    image = build_image(docker_client, tmp_path / "vendor")
    with faults_stack(docker_client, tiny_model, tmp_path) as stack:
        report = run_step(docker_client=docker_client, model=tiny_model, stack=stack, image=image,
                          workdir=tmp_path / "job", quick=True)
    assert not report.problems, "\n".join(report.problems)
    assert report.by_fault == {"ok": 4, "crash": 1, "crash_early": 1, "hang": 1, "fork": 2, "memhog": 1, "spam": 2}
    assert report.trainable == 8  # ok, fork and spam
    assert report.spans_lost == 0 and report.server_errors == 0 and report.escapes == 0
