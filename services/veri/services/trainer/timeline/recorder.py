"""`StepTimeline`: what the rollout function, the weight sync and TRL's callbacks know about a step's time,
turned into its timeline line and utilisation figures when the step's metrics are written (`ui.progress`).

Who tells it what (all times unix seconds, `time.time()`: the proxy's spans and the launcher's results
use the same clock on the host):
    TrainerPhases.on_step_begin          the window's start
    StepProgress.timing(name, seconds)   weight_sync / policy_pause / policy_sleep, ending now
    StepProgress.collected(rollouts)     a group's calls, as it finishes (either path, any thread)
    StepProgress.begin(...)              the step's rollouts (its bars) and its reward scoring
    TrainerPhases.on_pre_optimizer_step  forward/backward, from `begin` to now
    TrainerPhases.on_optimizer_step      the optimizer step
    StepProgress.flush -> finish(step)   the window's end: the line is written, the figures returned

With max_staleness >= 1 groups run on across steps: a replica's figure counts the calls of every group
finished by the step's end, whichever step takes it, and the calls recorded so far by the rollouts still
running then (`running_calls`: their spans, read from the proxy); only calls in flight at that moment
are left out.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from veri.core.records import Span
from veri.infra.http import HttpCallError
from veri.loop.collect.collect import CollectedRollout, GroupCollector
from veri.services.proxy.control_client import ControlClient
from veri.services.trainer.timeline.record import Call, Phase, RolloutTimes, step_timeline, utilisation

WriteTimeline = Callable[[int, dict[str, Any]], None]


class StepTimeline:
    def __init__(self, write: WriteTimeline, clock: Callable[[], float] = time.time,
                 running: Callable[[], list[Call]] | None = None) -> None:
        self.write = write
        self.clock = clock
        self.running = running  # the calls so far of rollouts still running (max_staleness >= 1)
        self._replicas: set[int] = set()  # every replica seen: one with no call in a step reads 0
        self._lock = threading.Lock()  # the producer's thread adds calls while the trainer steps
        self._calls: list[Call] = []  # every call seen that may still overlap a window to come
        self._start: float | None = None
        self._phases: list[Phase] = []
        self._bars: list[RolloutTimes] = []
        self._reward: tuple[float, float] | None = None
        self._trained_from: float | None = None

    def step_begin(self) -> None:
        self._start = self.clock()

    def phase(self, kind: str, start: float, end: float) -> None:
        self._phases.append(Phase(kind, start, end))

    def timed(self, kind: str, seconds: float) -> None:
        """A phase that ends now and lasted `seconds` (how the syncs report their time)."""
        end = self.clock()
        self.phase(kind, end - seconds, end)

    def collected(self, rollouts: list[CollectedRollout]) -> None:
        calls = [call for rollout in rollouts for call in _calls(rollout)]
        with self._lock:
            self._calls.extend(calls)

    def rollouts(self, rollouts: list[CollectedRollout], *, scoring_s: float, dropped: set[str]) -> None:
        """The step's rollouts (kept and dropped), just scored; scoring took the last `scoring_s` seconds."""
        now = self.clock()
        self._reward = (now - scoring_s, now)
        self._trained_from = now
        self._bars = [_times(rollout, dropped) for rollout in rollouts]

    def before_optimizer(self) -> None:
        now = self.clock()
        if self._trained_from is not None:
            self.phase("forward_backward", self._trained_from, now)
        self._trained_from = now  # the optimizer step runs from here

    def after_optimizer(self) -> None:
        if self._trained_from is not None:
            self.phase("optimizer", self._trained_from, self.clock())
        self._trained_from = None

    def finish(self, step: int) -> dict[str, float]:
        """Write the step's line; return its figures for the metrics line. Starts the next step's record."""
        end = self.clock()
        starts = [p.start for p in self._phases] + [b.launch[0] for b in self._bars]
        start = self._start if self._start is not None else min(starts, default=end)
        window = (start, end)
        running = self.running() if self.running is not None else []  # counted here, kept when collected
        with self._lock:
            calls = [c for c in [*self._calls, *running] if c.end > start and c.start < end]
            self._calls = [c for c in self._calls if c.end > end]  # what may still reach into the next window
        self._replicas |= {c.replica for c in calls}
        self.write(step, step_timeline(step, window, self._bars, self._phases, calls, self._reward, self._replicas))
        figures = utilisation(window, self._phases, calls, self._replicas)
        self._start, self._phases, self._bars, self._reward, self._trained_from = None, [], [], None, None
        return figures


class TrainerPhases(TrainerCallback):
    """TRL's step boundaries into the timeline: the step's start, forward/backward, the optimizer step."""

    def __init__(self, timeline: StepTimeline) -> None:
        self.timeline = timeline

    def on_step_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any) -> None:
        self.timeline.step_begin()

    def on_pre_optimizer_step(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                              **kw: Any) -> None:
        self.timeline.before_optimizer()

    def on_optimizer_step(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                          **kw: Any) -> None:
        self.timeline.after_optimizer()


def running_calls(collector: GroupCollector, control: ControlClient) -> Callable[[], list[Call]]:
    """The calls recorded so far by the collector's rollouts still running (a session that closes meanwhile
    is read all the same; one the proxy cannot answer for is left out: its calls arrive when collected)."""

    def read() -> list[Call]:
        calls = []
        for rollout_id in list(collector.running):
            try:
                calls += [_call(span) for span in control.spans(rollout_id)]
            except HttpCallError:
                continue
        return calls

    return read


def _call(span: Span) -> Call:
    return Call(span.started_at, span.started_at + span.duration_s, span.replica or 0)


def _calls(rollout: CollectedRollout) -> list[Call]:
    return [_call(span) for span in rollout.record.spans]


def _times(rollout: CollectedRollout, dropped: set[str]) -> RolloutTimes:
    record, launch = rollout.record, rollout.launch
    return RolloutTimes(rollout_id=record.rollout_id, task_index=record.task_index,
                        rollout_index=record.rollout_index, status=str(record.status),
                        launch=(launch.started_at, launch.started_at + launch.duration_s), calls=_calls(rollout),
                        scored=record.reward is not None, dropped=record.rollout_id in dropped)
