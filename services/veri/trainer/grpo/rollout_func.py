"""TRL's `rollout_func`: a batch of task keys -> harness rollouts -> scored records -> TRL's rows.

    rollouts(prompts, trainer) -> {"prompt_ids", "completion_ids", "logprobs", "env_mask", "veri_rewards"}

TRL 1.16 calls it once per generation batch with the batch's prompts, each task key repeated
num_generations times in a row (`rollouts.tasks`), and wants one completion per prompt, in order. Here:
  1. (vLLM) announce policy version = global_step to the proxy: TRL has just synced the weights;
  2. every group runs at once (`rollouts.collect.GroupCollector`), at most max_parallel_rollouts sandboxes
     over the batch; Ctrl-C / SIGTERM cancels them, which removes every sandbox, and then raises
     KeyboardInterrupt (`ui.interrupt.run_until_stopped`): nothing of the step is archived;
  3. each record that no rule rejected is scored (`rewards.scoring.RewardScorer`, all at once);
  4. every record is written to the archive under step = global_step, before any training on it;
  5. the step's records and timings go to `ui.progress` (metrics once the optimizer step is done);
  6. the records become TRL's rows (`rows.rollout_output`: masked records add nothing to the loss
     and leave their group's advantages alone).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from veri.core.episodes import Rule, Verdict
from veri.core.rollouts import RolloutRecord
from veri.launcher.group import gather_to_the_end
from veri.proxy.control_client import ControlClient
from veri.rewards import RewardInputs, RewardScorer
from veri.rollouts.collect import CollectedRollout, GroupCollector
from veri.trainer.grpo.rows import MaskedRow, rollout_output
from veri.trainer.rollouts.tasks import TaskGroup, task_groups
from veri.trainer.ui.interrupt import run_until_stopped
from veri.trainer.ui.progress import StepProgress
from veri.trainer.weights.sync import PolicyVersions, announce_version


class RolloutArchive(Protocol):
    def write_rollout(self, step: int, record: RolloutRecord, *, harness_log: str | None = None) -> Any: ...

    def log(self, message: str) -> None: ...


@dataclass
class HarnessRollouts:
    tasks: list[dict[str, Any]]  # the dataset rows, by task index
    collector: GroupCollector
    scorer: RewardScorer
    archive: RolloutArchive
    progress: StepProgress
    versions: PolicyVersions
    masked: MaskedRow
    max_parallel_rollouts: int
    announce_to: ControlClient | None = None  # vLLM: the proxy to announce versions to
    after_rollouts: Callable[[int], None] | None = None  # vllm_sleep_mode: the policy sleeps until the next sync

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        step = trainer.state.global_step
        groups = task_groups(prompts, trainer.num_generations)
        if self.announce_to is not None:
            announce_version(self.announce_to, step)
        started = time.monotonic()
        self.progress.rollouts_started(step, len(prompts))
        try:
            collected = run_until_stopped(self._collect(step, groups))
        except KeyboardInterrupt:
            self.archive.log(f"step {step}: stopped while its rollouts ran (sandboxes removed, nothing archived)")
            raise
        rolled = time.monotonic()
        collected = [self._reject_stale(step, rollout) for rollout in collected]
        logged: dict[str, list[float]] = {}
        records = self._score(collected, trainer.state, logged)
        scored = time.monotonic()
        for record, rollout in zip(records, collected, strict=True):
            self.archive.write_rollout(step, record, harness_log=harness_log(rollout))
        extra = {f"reward_log/{name}": sum(values) / len(values) for name, values in logged.items() if values}
        extra |= self._version_check(step, records)
        timings = {"rollout": rolled - started, "reward": scored - rolled}
        self.progress.begin(step, records, timings, extra)
        if self.after_rollouts is not None:
            self.after_rollouts(step)
        return rollout_output(records, self.masked, [f.name for f in self.scorer.functions])

    async def _collect(self, step: int, groups: list[TaskGroup]) -> list[CollectedRollout]:
        size = groups[0].size
        gate = asyncio.Semaphore(max(1, self.max_parallel_rollouts // size))  # groups running at once

        async def one(group: TaskGroup) -> list[CollectedRollout]:
            async with gate:
                collected = await self.collector.collect(
                    step=step, task_index=group.task_index, task=self.tasks[group.task_index], size=group.size,
                    first_rollout_index=group.first_rollout_index,
                )
            self.progress.rollouts_done(len(collected))
            return collected

        per_group = await gather_to_the_end([one(group) for group in groups])
        return [rollout for group in per_group for rollout in group]

    def _score(
        self, collected: list[CollectedRollout], state: Any, logged: dict[str, list[float]]
    ) -> list[RolloutRecord]:
        """Score every record no rule rejected (the others keep `reward=None`: not scored, masked)."""
        to_score = [c for c in collected if not c.record.episode.rejected]
        inputs = [
            RewardInputs.from_record(c.record, outputs=c.output_dir, trainer_state=state,
                                     log_metric=_metric_logger(logged), log_extra=self._extra_logger(c.record))
            for c in to_score
        ]
        outcomes = self.scorer.score_many(inputs)
        scored = {c.record.rollout_id: outcome for c, outcome in zip(to_score, outcomes, strict=True)}
        return [
            c.record.model_copy(update={"reward": scored[c.record.rollout_id]}) if c.record.rollout_id in scored
            else c.record
            for c in collected
        ]

    def _reject_stale(self, step: int, rollout: CollectedRollout) -> CollectedRollout:
        """A rollout with a span another policy version sampled is masked (`policy_version_stale`), never
        trained on as if the step's policy had written it."""
        expected = self.versions.expected(step)
        stale = [s for s in rollout.record.spans if s.policy_version is not None and s.policy_version != expected]
        if not stale:
            return rollout
        verdict = Verdict.of(Rule.POLICY_VERSION_STALE,
                             f"span {stale[0].request_index} was sampled by policy version {stale[0].policy_version},"
                             f" step {step} by version {expected} ({len(stale)} such span(s))",
                             span=stale[0].request_index, expected=expected,
                             versions=sorted({s.policy_version for s in stale}))
        episode = rollout.record.episode.model_copy(update={"verdicts": [*rollout.record.episode.verdicts, verdict]})
        return dataclasses.replace(rollout, record=rollout.record.model_copy(update={"episode": episode}))

    def _version_check(self, step: int, records: list[RolloutRecord]) -> dict[str, int]:
        expected = self.versions.expected(step)
        stale = [(r.rollout_id, s.request_index, s.policy_version) for r in records for s in r.spans
                 if s.policy_version != expected]
        if stale:
            self.archive.log(f"step {step}: {len(stale)} spans not sampled by policy version {expected}"
                             f" (rollout, span, version): {stale[:5]}")
        return {"policy_version/expected": expected, "policy_version/stale_spans": len(stale)}

    def _extra_logger(self, record: RolloutRecord) -> Callable[[str, list[Any]], None]:
        def log_extra(column: str, values: list[Any]) -> None:
            self.archive.log(f"reward log_extra {column} (rollout {record.rollout_id}): {values!r}"[:2000])

        return log_extra


def harness_log(rollout: CollectedRollout) -> str:
    launch = rollout.launch
    lines = [f"status {launch.status}  exit code {launch.exit_code}  {launch.duration_s:.1f}s"]
    if launch.infrastructure_error:
        lines.append(f"infrastructure error: {launch.infrastructure_error}")
    return "\n".join([*lines, "--- stdout (tail) ---", launch.stdout_tail, "--- stderr (tail) ---", launch.stderr_tail])


def _metric_logger(logged: dict[str, list[float]]) -> Callable[[str, float], None]:
    def log_metric(name: str, value: float) -> None:
        logged.setdefault(name, []).append(float(value))

    return log_metric
