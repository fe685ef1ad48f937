"""Per-step metrics into the archive: the step's rollouts, its timings and TRL's own logs, one write per step.

A step's metrics are written once its optimizer step is done and before TRL may checkpoint it (the
archive's commit point must precede the checkpoint, see `archive`): in `on_log` when TRL logs that
step (loss, grad norm, KL, entropy... under `train/`), else in `on_step_end`. HF's callback order makes
both precede the save: on_step_end -> log (on_log) -> save. Timings (seconds): rollout and reward (the
rollout function), weight_sync (hf: the push after the optimizer step; vLLM: the sync that loaded this
step's weights, before its rollouts), policy_sleep (vllm_sleep_mode: putting the policy to sleep after the
rollouts), train (rollouts done -> optimizer step done, an hf push and the sleep excluded).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from veri.archive.metrics import step_metrics
from veri.core.rollout_record import RolloutRecord
from veri.loop.collect.collect import CollectedRollout
from veri.services.trainer.timeline.recorder import StepTimeline

TRL_PREFIX = "train/"


class MetricsArchive(Protocol):
    def write_step_metrics(self, step: int, metrics: dict[str, float | int]) -> None: ...

    def log(self, message: str) -> None: ...


@dataclass
class StepRecord:
    step: int
    records: list[RolloutRecord]
    timings: dict[str, float]
    rollouts_done: float  # time.monotonic() when the rollout function returned
    extra: dict[str, float | int] = field(default_factory=dict)
    trl_logs: dict[str, float] = field(default_factory=dict)


class ProgressDisplay(Protocol):
    """Where a user watches the run (`ui.bars.TrainingBars`)."""

    def print(self, line: str) -> None: ...

    def rollouts_started(self, step: int, total: int) -> None: ...

    def rollouts_done(self, count: int) -> None: ...


class PlainDisplay:
    """Lines on stdout, no bars (tests, scripts)."""

    def print(self, line: str) -> None:
        print(line, flush=True)

    def rollouts_started(self, step: int, total: int) -> None:
        pass

    def rollouts_done(self, count: int) -> None:
        pass


class StepProgress:
    """What the rollout function, the weight sync and TRL's logs know about the current step."""

    def __init__(self, archive: MetricsArchive, display: ProgressDisplay | None = None,
                 timeline: StepTimeline | None = None) -> None:
        self.archive = archive
        self.display = display or PlainDisplay()
        self.timeline = timeline  # the step's timeline line and utilisation figures (`trainer.timeline`)
        self.current: StepRecord | None = None
        self.upcoming: dict[str, float] = {}  # timings taken before the step's rollouts (a vLLM weight sync)

    def rollouts_started(self, step: int, total: int) -> None:
        self.display.rollouts_started(step, total)

    def rollouts_done(self, count: int) -> None:
        self.display.rollouts_done(count)

    def collected(self, rollouts: list[CollectedRollout]) -> None:
        """A group finished (any thread): counted on the bars, its model calls kept for the timeline."""
        self.display.rollouts_done(len(rollouts))
        if self.timeline is not None:
            self.timeline.collected(rollouts)

    def rollouts_timed(self, rollouts: list[CollectedRollout], dropped: set[str], scoring_s: float) -> None:
        """The step's rollouts, scored just now: the timeline's bars."""
        if self.timeline is not None:
            self.timeline.rollouts(rollouts, scoring_s=scoring_s, dropped=dropped)

    def begin(self, step: int, records: list[RolloutRecord], timings: dict[str, float],
              extra: dict[str, float | int]) -> None:
        self.flush()
        self.current = StepRecord(step, records, {**self.upcoming, **timings}, time.monotonic(), dict(extra))
        self.upcoming = {}

    def timing(self, name: str, seconds: float) -> None:
        """A timing of the current step; between steps (TRL syncs vLLM before a step's rollouts), of the next."""
        if self.current is not None:
            self.current.timings[name] = seconds
        else:
            self.upcoming[name] = seconds
        if self.timeline is not None:
            self.timeline.timed(name, seconds)

    def figure(self, name: str, value: float) -> None:
        """A figure of the current step (e.g. the memory sleep mode freed) for its metrics line."""
        if self.current is not None:
            self.current.extra[name] = value

    def trained(self) -> None:
        """Called after the weight sync's on_step_end (the sync's own time is not training)."""
        if self.current is not None:
            elapsed = time.monotonic() - self.current.rollouts_done
            other = self.current.timings.get("weight_sync", 0.0) + self.current.timings.get("policy_sleep", 0.0)
            self.current.timings["train"] = elapsed - other

    def trl_logs(self, logs: dict[str, Any]) -> None:
        if self.current is not None:
            numbers = {k: float(v) for k, v in logs.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            self.current.trl_logs.update({k: v for k, v in numbers.items() if math.isfinite(v)})

    def flush(self) -> None:
        step = self.current
        if step is None:
            return
        self.current = None
        metrics = {**step_metrics(step.records, step.timings), **step.extra}
        metrics |= {TRL_PREFIX + key: value for key, value in step.trl_logs.items()}
        if self.timeline is not None:  # its line goes first: the metrics line stays the step's commit point
            metrics |= self.timeline.finish(step.step)
        self.archive.write_step_metrics(step.step, metrics)
        summary = f"step {step.step}: {metrics['trainable']}/{metrics['rollouts']} rollouts trainable"
        if "reward/mean" in metrics:
            summary += f", reward mean {metrics['reward/mean']:.4g}"
        if (held_out := metrics.get("eval/reward/mean")) is not None:  # eval_every: next to the training reward
            summary += f", eval reward mean {held_out:.4g}"
        if TRL_PREFIX + "loss" in metrics:
            summary += f", loss {metrics[TRL_PREFIX + 'loss']:.4g}"
        if metrics.get("tool_calls/parse_failed"):  # named as it happens: degrading tool use precedes reward collapse
            summary += f", tool calls unparsed {metrics['tool_calls/parse_failed']}/{metrics['tool_calls/attempted']}"
        if "staleness/max" in metrics:  # max_staleness >= 1: how far back it trained, and what it threw away
            summary += f", staleness max {metrics['staleness/max']:g}"
            if metrics.get("rollouts/stale_dropped"):  # the work thrown away: tokens sampled, sandbox time
                summary += (f", {metrics['rollouts/stale_dropped']:g} stale rollouts dropped"
                            f" ({metrics.get('tokens/stale_dropped', 0):g} sampled tokens,"
                            f" {metrics.get('sandbox_s/stale_dropped', 0):.0f} sandbox-s)")
        times = ", ".join(f"{name} {step.timings[name]:.1f}s" for name in ("rollout", "reward", "train", "weight_sync",
                                                                      "policy_sleep")
                          if name in step.timings)
        self.archive.log(summary)
        self.display.print(f"{summary} ({times})" if times else summary)  # the one line per step a user watches


class StepMetricsCallback(TrainerCallback):
    """Register after the weight sync: its on_step_end must see the sync's time and TRL's `should_log`."""

    def __init__(self, progress: StepProgress) -> None:
        self.progress = progress

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any) -> None:
        self.progress.trained()
        if not control.should_log:  # no log this step: complete it now, before any checkpoint
            self.progress.flush()

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
               logs: dict[str, Any] | None = None, **kw: Any) -> None:
        if logs is not None and "loss" in logs:  # the per-step log (not the end-of-training summary)
            self.progress.trl_logs(logs)
            self.progress.flush()

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any) -> None:
        self.progress.flush()
