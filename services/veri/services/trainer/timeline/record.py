"""One step's timeline record (a plain JSON-able dict, a line of timeline.jsonl) and its utilisation figures.

    step_timeline(step, window, rollouts, phases, calls) -> {"step", "start", "wall_s", "rollouts", "trainer",
                                                             "sync", "policy", "trainer_idle", "utilisation"}

Every time in the record is in seconds from the window's start (`start`, unix seconds): the step's wall
time runs from TRL's step begin to its metrics line. A rollout bar may begin before 0 (max_staleness >= 1:
it was sampled while an earlier step trained). A bar's segments: `sandbox_start` (launch to its first
model call; the whole launch when it made none), `model` (each call, with the replica that served it),
`harness` (between and after the calls: the harness's own code and its tools), `reward` (the step's
scoring, for a rollout that was scored). Utilisation, per step:
    utilisation/policy_<r>   the fraction of the window during which replica r had a request in flight
                             (the union of its calls' intervals: calls at once count once)
    utilisation/trainer      the fraction spent in forward/backward and the optimizer step
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from veri.services.trainer.timeline.intervals import Interval, busy_fraction, clip, gaps, union

TRAINER_PHASES = ("forward_backward", "optimizer")
SYNC_PHASES = ("weight_sync", "policy_pause", "policy_sleep")


@dataclass(frozen=True)
class Call:
    start: float  # unix seconds
    end: float
    replica: int


@dataclass
class RolloutTimes:
    rollout_id: str
    task_index: int
    rollout_index: int
    status: str
    launch: Interval  # unix seconds: the launcher's start and end of its sandbox
    calls: list[Call] = field(default_factory=list)
    scored: bool = False
    dropped: bool = False  # max_staleness >= 1: too stale, archived but not trained


@dataclass
class Phase:
    kind: str  # one of TRAINER_PHASES or SYNC_PHASES
    start: float
    end: float


def utilisation(window: Interval, phases: list[Phase], calls: list[Call],
                replicas: set[int] | None = None) -> dict[str, float]:
    """The step's figures for its metrics line (see the module docstring); `replicas`: also those known to
    exist that made no call in the window (0)."""
    figures = {}
    for replica in sorted({call.replica for call in calls} | (replicas or set())):
        intervals = [(c.start, c.end) for c in calls if c.replica == replica]
        figures[f"utilisation/policy_{replica}"] = busy_fraction(intervals, window)
    figures["utilisation/trainer"] = busy_fraction(_of(phases, TRAINER_PHASES), window)
    return figures


def step_timeline(step: int, window: Interval, rollouts: list[RolloutTimes], phases: list[Phase],
                  calls: list[Call], reward: Interval | None, replicas: set[int] | None = None) -> dict[str, Any]:
    """The record; `calls` are every call known to overlap the window (utilisation), not only these rollouts'."""
    origin = window[0]

    def rel(interval: Interval) -> list[float]:
        return [round(interval[0] - origin, 3), round(interval[1] - origin, 3)]

    policy = {}
    for replica in sorted({call.replica for call in calls} | (replicas or set())):
        busy = union(clip([(c.start, c.end) for c in calls if c.replica == replica], window))
        policy[str(replica)] = {"busy": [rel(i) for i in busy], "idle": [rel(i) for i in gaps(busy, window)]}
    return {
        "step": step, "start": origin, "wall_s": round(window[1] - window[0], 3),
        "rollouts": [_bar(rollout, reward, rel) for rollout in rollouts],
        "trainer": [{"kind": p.kind, "at": rel((p.start, p.end))} for p in phases if p.kind in TRAINER_PHASES],
        "sync": [{"kind": p.kind, "at": rel((p.start, p.end))} for p in phases if p.kind in SYNC_PHASES],
        "policy": policy,
        "trainer_idle": [rel(i) for i in gaps(_of(phases, TRAINER_PHASES), window)],
        "utilisation": {key.removeprefix("utilisation/"): round(value, 4)
                        for key, value in utilisation(window, phases, calls, replicas).items()},
    }


def _bar(rollout: RolloutTimes, reward: Interval | None, rel: Any) -> dict[str, Any]:
    calls = sorted(rollout.calls, key=lambda c: c.start)
    launched, ended = rollout.launch
    first = calls[0].start if calls else ended
    segments = [{"kind": "sandbox_start", "at": rel((launched, max(launched, first)))}]
    segments += [{"kind": "model", "at": rel((c.start, c.end)), "replica": c.replica} for c in calls]
    if calls:  # the harness's own time: between its calls and after the last one
        segments += [{"kind": "harness", "at": rel(gap)}
                     for gap in gaps([(c.start, c.end) for c in calls], (first, max(first, ended)))]
    if rollout.scored and reward is not None:
        segments.append({"kind": "reward", "at": rel(reward)})
    return {"rollout_id": rollout.rollout_id, "task": rollout.task_index, "rollout": rollout.rollout_index,
            "status": rollout.status, "dropped": rollout.dropped, "segments": segments}


def _of(phases: list[Phase], kinds: tuple[str, ...]) -> list[Interval]:
    return [(p.start, p.end) for p in phases if p.kind in kinds]
