"""The step timeline's arithmetic on constructed data: overlapping calls counted once, idle gaps, the
figures in [0, 1], a rollout's bar (sandbox start, model calls, harness time, reward), and the recorder's
window (TRL's step begin to the metrics line) with a call that reaches into the next step."""

from __future__ import annotations

import pytest

from veri.services.trainer.timeline.intervals import busy_fraction, covered, gaps, union
from veri.services.trainer.timeline.record import Call, Phase, RolloutTimes, step_timeline, utilisation
from veri.services.trainer.timeline.recorder import StepTimeline


def test_overlapping_intervals_count_once_and_gaps_are_what_is_left():
    calls = [(1.0, 4.0), (2.0, 3.0), (3.5, 5.0), (7.0, 8.0)]
    assert union(calls) == [(1.0, 5.0), (7.0, 8.0)]
    assert covered(calls, (0.0, 10.0)) == 5.0
    assert gaps(calls, (0.0, 10.0)) == [(0.0, 1.0), (5.0, 7.0), (8.0, 10.0)]
    assert busy_fraction(calls, (0.0, 10.0)) == 0.5
    assert covered(calls, (4.5, 7.5)) == 1.0  # clipped to the window
    assert busy_fraction([(0.0, 20.0)], (5.0, 10.0)) == 1.0
    assert busy_fraction([], (0.0, 10.0)) == 0.0 and busy_fraction(calls, (3.0, 3.0)) == 0.0


def test_utilisation_per_replica_and_the_trainer():
    window = (100.0, 110.0)
    calls = [Call(100.0, 104.0, 0), Call(101.0, 103.0, 0), Call(102.0, 103.0, 1), Call(95.0, 101.0, 1)]
    phases = [Phase("forward_backward", 106.0, 108.0), Phase("optimizer", 108.0, 108.5),
              Phase("weight_sync", 108.5, 110.0)]
    figures = utilisation(window, phases, calls)
    assert figures == pytest.approx({"utilisation/policy_0": 0.4, "utilisation/policy_1": 0.2,
                                     "utilisation/trainer": 0.25})
    assert all(0.0 <= value <= 1.0 for value in figures.values())


def test_a_rollout_bar_has_its_sandbox_start_calls_harness_time_and_reward():
    rollout = RolloutTimes("r0", task_index=3, rollout_index=1, status="completed", launch=(100.0, 107.0),
                           calls=[Call(103.0, 104.0, 0), Call(101.0, 102.0, 0)], scored=True)
    silent = RolloutTimes("r1", task_index=3, rollout_index=2, status="failed", launch=(100.0, 101.5))
    record = step_timeline(4, (100.0, 112.0), [rollout, silent],
                           [Phase("forward_backward", 108.0, 111.0), Phase("optimizer", 111.0, 111.5)],
                           rollout.calls, reward=(107.0, 108.0))
    bar = record["rollouts"][0]
    assert (bar["task"], bar["rollout"], bar["status"]) == (3, 1, "completed")
    assert [(s["kind"], s["at"]) for s in bar["segments"]] == [
        ("sandbox_start", [0.0, 1.0]), ("model", [1.0, 2.0]), ("model", [3.0, 4.0]),
        ("harness", [2.0, 3.0]), ("harness", [4.0, 7.0]), ("reward", [7.0, 8.0])]
    assert [s["kind"] for s in record["rollouts"][1]["segments"]] == ["sandbox_start"]  # no call, not scored
    assert record["policy"]["0"] == {"busy": [[1.0, 2.0], [3.0, 4.0]],
                                     "idle": [[0.0, 1.0], [2.0, 3.0], [4.0, 12.0]]}
    assert record["trainer_idle"] == [[0.0, 8.0], [11.5, 12.0]]
    assert record["utilisation"] == {"policy_0": pytest.approx(2 / 12, abs=1e-4), "trainer": pytest.approx(3.5 / 12,
                                                                                                            abs=1e-4)}
    assert record["wall_s"] == 12.0 and record["start"] == 100.0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_recorder_windows_a_step_and_keeps_a_call_that_reaches_into_the_next():
    written: dict[int, dict] = {}
    clock = Clock()
    still_running: list[Call] = []  # the calls so far of rollouts not yet collected
    timeline = StepTimeline(lambda step, line: written.__setitem__(step, line), clock=clock,
                            running=lambda: still_running)
    timeline.step_begin()  # t = 0
    timeline._calls += [Call(1.0, 3.0, 0), Call(2.0, 14.0, 1)]  # replica 1's call runs on into step 1
    clock.now = 5.0
    timeline.before_optimizer()  # no rollouts reported: no forward/backward phase, the optimizer from here
    clock.now = 6.0
    timeline.after_optimizer()
    clock.now = 8.0
    timeline.timed("weight_sync", 2.0)
    clock.now = 10.0
    figures = timeline.finish(0)
    assert figures == pytest.approx({"utilisation/policy_0": 0.2, "utilisation/policy_1": 0.8,
                                     "utilisation/trainer": 0.1})
    assert written[0]["sync"] == [{"kind": "weight_sync", "at": [6.0, 8.0]}]
    timeline.step_begin()
    still_running.append(Call(16.0, 18.0, 1))  # a group of a later step, running at this step's end
    clock.now = 20.0
    # Replica 0 made no call in this step: 0, not left out; replica 1: its call from step 0 and the running one.
    assert timeline.finish(1) == pytest.approx({"utilisation/policy_0": 0.0, "utilisation/policy_1": 0.6,
                                                "utilisation/trainer": 0.0})
    assert written[1]["policy"]["0"] == {"busy": [], "idle": [[0.0, 10.0]]}
