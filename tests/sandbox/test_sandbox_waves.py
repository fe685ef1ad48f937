"""Sandboxes in waves (docs/reliability.md), CI-sized: bench/reliability/scenarios/sandbox_waves.py with one
wave of 8 rollouts through a real launcher service into runsc sandboxes (the scenario: 256 in waves of
64). Every one completes with its start time collected; none is left behind."""

from __future__ import annotations

from bench.reliability.scenarios import sandbox_waves


def test_a_wave_of_eight_launches_without_a_failure(docker_client) -> None:
    report = sandbox_waves.check(docker_client, waves=1, wave=8)
    assert report.failures == []
    assert len(report.launches_s) == 8 and report.leftovers == 0
    assert all(0 < seconds < sandbox_waves.TIMEOUT_S for seconds in report.launches_s)
    print(report.notes(1, 8))
