"""`veri train --metrics-port PORT`: the job's step figures for Prometheus, served while the job runs.

The trainer is a batch process, not a server: a small HTTP thread (prometheus-client's) answers
`GET /metrics` on 127.0.0.1 (or `--metrics-host`) until the job ends. The figures are the step
metrics the archive already writes (`archive/metrics.py`), taken as each metrics line is written,
plus the step whose rollouts are running now:

    veri_trainer_step                              the step being worked on (its rollouts started)
    veri_trainer_step_rollouts{state}              that step's rollouts: total, done
    veri_trainer_steps_completed_total             steps whose metrics line is written
    veri_trainer_step_phase_seconds{phase}         rollout, reward, train, weight_sync, policy_sleep: a step's split
    veri_trainer_step_seconds                      a whole step
    veri_trainer_policy_version                    the newest policy version that sampled the last step
    veri_trainer_rollouts_total{status}            completed / failed / truncated
    veri_trainer_rollouts_masked_total             rollouts left out of the loss
    veri_trainer_rollout_rules_total{rule}         rollouts where that rule fired (every rule, zeros too)
    veri_trainer_reward_mean                       the last completed step's mean reward

A resumed job starts its counters at zero again (Prometheus reads that as a restart).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from veri.core.episodes import RolloutStatus
from veri.core.rules import Rule
from veri.services.trainer.errors import JobError
from veri.services.trainer.ui.progress import MetricsArchive, ProgressDisplay

# A step's phases run from seconds (a tiny model on CPU) to an hour (a large group on a GPU box).
STEP_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0)
PHASE_PREFIX, PHASE_SUFFIX = "time/", "_s"


class TrainerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.step = Gauge("veri_trainer_step", "the step being worked on", registry=r)
        self.step_rollouts = Gauge("veri_trainer_step_rollouts", "the current step's rollouts", ("state",),
                                   registry=r)
        self.steps_completed = Counter("veri_trainer_steps_completed", "steps whose metrics line is written",
                                       registry=r)
        self.phase_seconds = Histogram("veri_trainer_step_phase_seconds", "a step's time per phase", ("phase",),
                                       registry=r, buckets=STEP_BUCKETS)
        self.step_seconds = Histogram("veri_trainer_step_seconds", "a whole step", registry=r, buckets=STEP_BUCKETS)
        self.policy_version = Gauge("veri_trainer_policy_version",
                                    "the newest policy version that sampled the last completed step", registry=r)
        self.rollouts = Counter("veri_trainer_rollouts", "rollouts archived, by harness status", ("status",),
                                registry=r)
        self.masked = Counter("veri_trainer_rollouts_masked", "rollouts left out of the loss", registry=r)
        self.rules = Counter("veri_trainer_rollout_rules", "rollouts where a rule fired", ("rule",), registry=r)
        self.reward_mean = Gauge("veri_trainer_reward_mean", "the last completed step's mean reward", registry=r)
        for state in ("total", "done"):
            self.step_rollouts.labels(state)
        for status in RolloutStatus:
            self.rollouts.labels(status.value)
        for rule in Rule:
            self.rules.labels(rule.value)

    def rollouts_started(self, step: int, total: int) -> None:
        self.step.set(step)
        self.step_rollouts.labels("total").set(total)
        self.step_rollouts.labels("done").set(0)

    def rollouts_done(self, count: int) -> None:
        self.step_rollouts.labels("done").inc(count)

    def step_completed(self, metrics: dict[str, float | int]) -> None:
        """One step's metrics line (archive/metrics.py `step_metrics` keys)."""
        self.steps_completed.inc()
        for key, seconds in metrics.items():
            if key.startswith(PHASE_PREFIX) and key.endswith(PHASE_SUFFIX) and key != "time/step_s":
                self.phase_seconds.labels(key.removeprefix(PHASE_PREFIX).removesuffix(PHASE_SUFFIX)).observe(seconds)
        if "time/step_s" in metrics:
            self.step_seconds.observe(metrics["time/step_s"])
        for status in RolloutStatus:
            self.rollouts.labels(status.value).inc(metrics.get(f"status/{status.value}", 0))
        for rule in Rule:
            self.rules.labels(rule.value).inc(metrics.get(f"rule/{rule.value}", 0))
        self.masked.inc(metrics.get("masked", 0))
        if "policy_version/max" in metrics:
            self.policy_version.set(metrics["policy_version/max"])
        if "reward/mean" in metrics:
            self.reward_mean.set(metrics["reward/mean"])


class ObservedArchive:
    """The archive as `StepProgress` writes to it; each step's metrics line also reaches the metrics,
    after it is written (a scrape never shows a step the archive does not have)."""

    def __init__(self, archive: MetricsArchive, metrics: TrainerMetrics) -> None:
        self.archive = archive
        self.metrics = metrics

    def write_step_metrics(self, step: int, metrics: dict[str, float | int]) -> None:
        self.archive.write_step_metrics(step, metrics)
        self.metrics.step_completed(metrics)

    def log(self, message: str) -> None:
        self.archive.log(message)


class ObservedDisplay:
    """The progress display, with the rollouts of the running step counted as they finish."""

    def __init__(self, display: ProgressDisplay, metrics: TrainerMetrics) -> None:
        self.display = display
        self.metrics = metrics

    def print(self, line: str) -> None:
        self.display.print(line)

    def rollouts_started(self, step: int, total: int) -> None:
        self.metrics.rollouts_started(step, total)
        self.display.rollouts_started(step, total)

    def rollouts_done(self, count: int) -> None:
        self.metrics.rollouts_done(count)
        self.display.rollouts_done(count)


def observed(archive: MetricsArchive, display: ProgressDisplay,
             metrics: TrainerMetrics | None) -> tuple[MetricsArchive, ProgressDisplay]:
    """What `StepProgress` writes to and shows on: watched by the metrics when they are served."""
    if metrics is None:
        return archive, display
    return ObservedArchive(archive, metrics), ObservedDisplay(display, metrics)


@contextlib.contextmanager
def serve_trainer_metrics(host: str, port: int | None) -> Iterator[TrainerMetrics | None]:
    """`GET /metrics` on host:port while the block runs; port None: off (yields None)."""
    if port is None:
        yield None
        return
    metrics = TrainerMetrics()
    try:
        server, thread = start_http_server(port, addr=host, registry=metrics.registry)
    except OSError as error:
        raise JobError(f"--metrics-port {port} on {host}: {error.strerror or error}; pick a free port"
                       " or leave --metrics-port off") from error
    try:
        yield metrics
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

