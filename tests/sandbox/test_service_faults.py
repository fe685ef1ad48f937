"""The service faults (docs/reliability.md), CI-sized: one `veri train` job of 6 steps (2 rollouts each) through the
launcher service (docker backend, runsc) and a capture proxy container with a restart policy, where
step 0 loses the proxy, step 1 the launcher (and the console), step 2 the policy server and step 4 the trainer itself,
each to a kill -9 mid-step, and step 3 dockerd (stopped ~8 s, live-restore; needs root); then a job
whose archive volume fills up. The checks and the full-size run
are bench/reliability/scenarios/service_faults.py (`make reliability ONLY=service_faults`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.reliability.scenarios.dockerd_outage import PROBE_EXIT, unstoppable
from bench.reliability.scenarios.service_faults import (
    FaultReport,
    build_image,
    disk_full_job,
    remove_image,
    run_faults,
    service_stack,
    small_volume,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # a 6-step job with 5 restarts, then a second job


@pytest.fixture(scope="module")
def faults_stack(docker_client, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory):
    workdir = tmp_path_factory.mktemp("service-faults")
    image = build_image(docker_client, workdir / "vendor")
    try:
        with service_stack(docker_client, tiny_model, workdir) as stack:
            yield stack, image, workdir
    finally:
        remove_image(docker_client, image)


def test_the_job_survives_kill_9_of_each_service_mid_step(docker_client, tiny_model: Path, faults_stack):
    stack, image, workdir = faults_stack
    why_not = unstoppable(docker_client)
    report: FaultReport = run_faults(docker_client=docker_client, stack=stack, model=tiny_model, image=image,
                                     workdir=workdir, quick=True, stop_dockerd=why_not is None)
    assert not report.problems, "\n".join(report.problems)
    assert report.rollouts == 12 and report.masked_infra >= 1
    assert report.spans_lost == 0 and report.escapes == 0 and report.server_errors == 0
    if why_not is not None:
        assert set(report.restarts) == {"proxy", "launcher", "console", "policy"}
        pytest.skip(f"the dockerd step ran without stopping dockerd: {why_not}")
    assert set(report.restarts) == {"proxy", "launcher", "console", "policy", "dockerd"}
    # dockerd away ~8 s: the step's sandboxes ran on and their rollouts completed (trained, checked above)
    assert report.dockerd_step == {"completed": 2} and report.launcher_away_s
    outage = report.outage
    assert outage.probe_answers > 0 and outage.proxy_health and outage.probe_exit == PROBE_EXIT
    assert outage.published_back_s is not None
    print(f"dockerd away {outage.seconds:.1f} s: probe answered {outage.probe_answers} times, exit {outage.probe_exit};"
          f" published port {outage.published_down}, back {outage.published_back_s:.1f} s after dockerd")


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting the small tmpfs volume needs root")
def test_a_full_state_volume_stops_the_job_naming_it(tiny_model: Path, faults_stack):
    stack, image, workdir = faults_stack
    with small_volume(8) as volume:
        problems = disk_full_job(stack=stack, model=tiny_model, image=image, workdir=workdir, volume=volume)
    assert not problems, "\n".join(problems)
