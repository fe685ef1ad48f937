"""TRL's `rollout_func`: a batch of task keys -> harness rollouts -> scored records -> TRL's rows.

    rollouts(prompts, trainer) -> {"prompt_ids", "completion_ids", "logprobs", "env_mask", "veri_rewards"}

TRL 1.16 calls it once per generation batch with the batch's prompts, each task key repeated
num_generations times in a row (`rollouts.tasks`), and wants one completion per prompt, in order. Here:
  1. (vLLM) TRL has just synced the weights, and the sync announced version = global_step to the proxy
     (`weights.vllm_sync.AnnouncedSync`);
  2. every group runs at once (`rollouts.collect.GroupCollector`), at most max_parallel_rollouts sandboxes
     over the batch; Ctrl-C / SIGTERM cancels them, which removes every sandbox, and then raises
     KeyboardInterrupt (`ui.interrupt.run_until_stopped`): nothing of the step is archived;
  2b. a rollout with a span another policy version sampled (`policy_version_stale`), or one a policy server
     served after it restarted with its model folder's weights (`policy_server_restarted`: each server is
     asked which process serves, `weights.served.ServedWeights`), is rejected before scoring;
  3. each record that no rule rejected is scored (`rewards.scoring.RewardScorer`, all at once); with
     grpo.mask_truncated_completions, a scored record with an unfinished row is masked whole
     (`completion_truncated`: left out of the loss, its reward kept in its group's baseline);
  4. every record is written to the archive under step = global_step, before any training on it;
  5. the step's records and timings go to `ui.progress` (metrics once the optimizer step is done);
  6. the records become TRL's rows (`rows.rollout_output`: masked records add nothing to the loss
     and leave their group's advantages alone).

max_staleness k >= 1 (asynchronous training) changes steps 1 and 2 only: groups run on the
`rollouts.producer.GroupProducer`'s loop across step boundaries, so the groups for steps s+1 .. s+k
sample while step s trains. A group admitted at step s is due at step s+k: a step takes its due groups
(waiting for them) and otherwise the first to *finish* (TRL's prompts only give their number: which task
each runs is the producer's schedule), so none is trained more than k versions after it was admitted
(the rule and its proof: docs/async-training.md). One whose oldest span is more than k versions older
than the weights being trained all the same is dropped (archived under the step with
`policy_version_stale`, counted in `rollouts/stale_dropped`, `tokens/stale_dropped`,
`sandbox_s/stale_dropped`); each kept rollout records its `staleness`. TRL's importance ratio (trainer /
sampler probability per token, truncated at `importance_sampling_cap`) corrects the off-policy tokens;
the version announcement happens inside the paused weight update.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from veri.core.episodes import unfinished_rows
from veri.core.rollout_record import RolloutRecord
from veri.core.rules import Rule, Verdict
from veri.infra.aio import gather_to_the_end
from veri.loop.collect.collect import CollectedRollout, GroupCollector, harness_log, verifier_files
from veri.loop.rewards import RewardInputs, RewardScorer
from veri.services.trainer.grpo.rows import MaskedRow, rollout_output
from veri.services.trainer.schedule.producer import FinishedGroup, GroupProducer, GroupSchedule
from veri.services.trainer.schedule.tasks import TaskGroup, task_groups
from veri.services.trainer.ui.interrupt import run_until_stopped
from veri.services.trainer.ui.progress import StepProgress
from veri.services.trainer.weights.served import ServedWeights
from veri.services.trainer.weights.sync import PolicyVersions


class RolloutArchive(Protocol):
    def write_rollout(self, step: int, record: RolloutRecord, *, harness_log: str | None = None,
                      verifier_files: dict[str, str] | None = None) -> Any: ...

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
    served: ServedWeights | None = None  # which policy servers restarted since they got the job's weights
    after_rollouts: Callable[[int], None] | None = None  # vllm_sleep_mode: the policy sleeps until the next sync
    max_staleness: int = 0
    mask_truncated: bool = False  # grpo.mask_truncated_completions, per rollout (`completion_truncated`)
    group_size: int = 0  # max_staleness >= 1: the rollouts of a group (TRL's num_generations)
    max_steps: int = 0  # max_staleness >= 1: no group is started for a step past the last
    groups_per_step: int = 1  # max_staleness >= 1: TRL's generation batch / num_generations
    schedule: GroupSchedule | None = None  # max_staleness >= 1: which task each group runs
    hold_step_s: float | None = None  # max_staleness >= 1: a due group running longer no longer holds a step
    producer: GroupProducer | None = None  # max_staleness >= 1: started at the first step
    step: int = 0  # the step the trainer is at (the producer's groups are sampled for it)
    _consumed: int = 0  # groups taken or dropped so far (max_staleness >= 1)
    _dropped: int = 0
    _remaining: int = 0  # groups the job's steps left still need (none is started past them)

    def start_producer(self, *, first_step: int) -> GroupProducer:
        """max_staleness >= 1: groups run on their own loop from now on (`rollouts.producer`)."""
        assert self.schedule is not None
        self.step = first_step
        self._remaining = (self.max_steps - first_step) * self.groups_per_step
        at_once = max(1, self.max_parallel_rollouts // self.group_size)
        self.producer = GroupProducer(self.run_group, self.schedule, max_parallel_groups=at_once,
                                      first_group=first_step * self.groups_per_step, max_staleness=self.max_staleness,
                                      groups_per_step=self.groups_per_step, hold_step_s=self.hold_step_s)
        self.producer.start()
        return self.producer

    def stop_producer(self) -> None:
        """The job ends or stops: cancel the groups still running (sandboxes removed), say what was left."""
        if self.producer is None:
            return
        left = self.producer.stop()
        self.producer = None
        if left.running or left.untrained:
            self.archive.log(f"rollouts left untrained at the end: {left.running} group(s) cancelled while they ran"
                             f" (sandboxes removed), {left.untrained} finished but not taken by a step; a resumed"
                             " job samples them afresh")

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        step = trainer.state.global_step
        self.step = step
        started = time.monotonic()
        self.progress.rollouts_started(step, len(prompts))
        if self.schedule is not None and self.producer is None:
            self.start_producer(first_step=step)
        if self.producer is None:
            collected, extra, dropped = self._run_step(step, task_groups(prompts, trainer.num_generations)), {}, []
        else:
            collected, extra, dropped = self._take_step(step, len(prompts) // trainer.num_generations)
        rolled = time.monotonic()
        collected = [self._reject_stale(step, rollout) for rollout in collected]
        collected = self._reject_restarted(step, collected)
        logged: dict[str, list[float]] = {}
        records = [self._mask_truncated(record) for record in self._score(collected, trainer.state, logged)]
        scored = time.monotonic()
        for record, rollout in zip(records, collected, strict=True):
            self.archive.write_rollout(step, record, harness_log=harness_log(rollout),
                                       verifier_files=verifier_files(rollout))
        for rollout in dropped:  # filed under the step that dropped them, never trained
            self.archive.write_rollout(step, rollout.record, harness_log=harness_log(rollout),
                                       verifier_files=verifier_files(rollout))
        extra |= {f"reward_log/{name}": sum(values) / len(values) for name, values in logged.items() if values}
        extra |= self._version_check(step, records)
        timings = {"rollout": rolled - started, "reward": scored - rolled}
        self.progress.rollouts_timed([dataclasses.replace(c, record=r) for c, r in zip(collected, records, strict=True)]
                                     + dropped, {r.record.rollout_id for r in dropped}, scored - rolled)
        self.progress.begin(step, records, timings, extra)
        if self.after_rollouts is not None:
            self.after_rollouts(step)
        return rollout_output(records, self.masked, [f.name for f in self.scorer.functions])

    def _run_step(self, step: int, groups: list[TaskGroup]) -> list[CollectedRollout]:
        """max_staleness 0: the step's groups, started now, all waited for."""
        try:
            return run_until_stopped(self._collect(step, groups))
        except KeyboardInterrupt:
            self.archive.log(f"step {step}: stopped while its rollouts ran (sandboxes removed, nothing archived)")
            raise

    def _take_step(
        self, step: int, groups: int
    ) -> tuple[list[CollectedRollout], dict[str, float], list[CollectedRollout]]:
        """max_staleness k >= 1: `groups` finished groups, those due at this step first (admitted k steps ago:
        waited for), then the first to finish; a group whose oldest span is still more than k versions older
        than the weights being trained (a restarted server, a straggler past `hold_step_s`) is dropped
        (archived with the verdict, counted). Admission: at most (k + 1) steps' worth beyond what was taken."""
        assert self.producer is not None
        bound, expected = self.max_staleness, self.versions.expected(step)
        self.producer.allow(min(self._consumed + (bound + 1) * groups, self._remaining + self._dropped), step)
        released = self.producer.released
        kept, dropped = self.producer.take(groups, lambda group: _staleness(group, expected) <= bound, step)
        if self.producer.released > released:
            self.archive.log(f"step {step}: {self.producer.released - released} due group(s) ran past"
                             f" {self.hold_step_s:g} s and stopped holding the step (dropped if stale when they end)")
        self._consumed += len(kept) + len(dropped)
        self._dropped += len(dropped)
        lags = [_staleness(group, expected) for group in kept]
        index = _StepIndex()
        # Filed under the step that trains it (the archive's facet); `staleness` says how far back it was sampled:
        # its own oldest span (the group's bound is its oldest rollout's; a group can straddle a weight update).
        collected = [dataclasses.replace(rollout, record=rollout.record.model_copy(
                         update={"staleness": _rollout_staleness(rollout, expected), "policy_step": step,
                                 "rollout_index": index.next(group)}))
                     for group in kept for rollout in group.rollouts]
        stale = [self._mark_stale(step, rollout, expected, _staleness(group, expected), index.next(group))
                 for group in dropped for rollout in group.rollouts]
        if dropped:
            self.archive.log(f"step {step}: dropped {len(dropped)} group(s) sampled more than max_staleness {bound}"
                             f" versions before version {expected} (tasks {[g.task_index for g in dropped]})")
        extra = {"rollouts/stale_dropped": len(stale), "groups/stale_dropped": len(dropped),
                 "staleness/max": max(lags, default=0), "staleness/mean": sum(lags) / len(lags) if lags else 0.0,
                 **_waste(collected, stale)}
        for lag in range(bound + 1):
            extra[f"staleness/groups_{lag}"] = lags.count(lag)
        return collected, extra, stale

    async def run_group(self, number: int, task_index: int) -> list[CollectedRollout]:
        """The producer's way to run one group (sampled for the step the trainer is at now)."""
        step = self.step
        collected = await self.collector.collect(step=step, task_index=task_index, task=self.tasks[task_index],
                                                 size=self.group_size, first_rollout_index=0)
        self.progress.collected(collected)
        return collected

    def _mark_stale(
        self, step: int, rollout: CollectedRollout, expected: int, lag: int, rollout_index: int
    ) -> CollectedRollout:
        verdict = Verdict.of(Rule.POLICY_VERSION_STALE,
                             f"its oldest span was sampled {lag} versions before version {expected}, which step"
                             f" {step} trains; max_staleness is {self.max_staleness}", expected=expected, lag=lag)
        episode = rollout.record.episode.model_copy(update={"verdicts": [*rollout.record.episode.verdicts, verdict]})
        record = rollout.record.model_copy(update={"episode": episode, "staleness": lag, "policy_step": step,
                                                   "rollout_index": rollout_index})
        return dataclasses.replace(rollout, record=record)

    async def _collect(self, step: int, groups: list[TaskGroup]) -> list[CollectedRollout]:
        size = groups[0].size
        gate = asyncio.Semaphore(max(1, self.max_parallel_rollouts // size))  # groups running at once

        async def one(group: TaskGroup) -> list[CollectedRollout]:
            async with gate:
                collected = await self.collector.collect(
                    step=step, task_index=group.task_index, task=self.tasks[group.task_index], size=group.size,
                    first_rollout_index=group.first_rollout_index,
                )
            self.progress.collected(collected)
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
        stale = [s for s in rollout.record.spans if not 0 <= expected - s.policy_version <= self.max_staleness]
        if not stale:
            return rollout
        verdict = Verdict.of(Rule.POLICY_VERSION_STALE,
                             f"span {stale[0].request_index} was sampled by policy version {stale[0].policy_version},"
                             f" step {step} by version {expected} ({len(stale)} such span(s))",
                             span=stale[0].request_index, expected=expected,
                             versions=sorted({s.policy_version for s in stale}))
        episode = rollout.record.episode.model_copy(update={"verdicts": [*rollout.record.episode.verdicts, verdict]})
        return dataclasses.replace(rollout, record=rollout.record.model_copy(update={"episode": episode}))

    def _mask_truncated(self, record: RolloutRecord) -> RolloutRecord:
        """grpo.mask_truncated_completions: a scored rollout with a row the policy did not finish is left out of
        the loss whole (`completion_truncated`: every row, not only the one in TRL's slot); its reward stays in
        its group's baseline. A reply the client's stop sequence ended is finished."""
        if not self.mask_truncated or not record.trainable:
            return record
        unfinished = unfinished_rows(record.episode, record.spans)
        if not unfinished:
            return record
        verdict = Verdict.of(Rule.COMPLETION_TRUNCATED,
                             f"{unfinished[0]}{f' (and {len(unfinished) - 1} more)' if len(unfinished) > 1 else ''}:"
                             " grpo.mask_truncated_completions leaves every row of the rollout out of the loss",
                             rows=unfinished)
        episode = record.episode.model_copy(update={"verdicts": [*record.episode.verdicts, verdict]})
        return record.model_copy(update={"episode": episode})

    def _reject_restarted(self, step: int, collected: list[CollectedRollout]) -> list[CollectedRollout]:
        """A rollout with a span a policy server served after it restarted (its model folder's weights, whatever
        version the span carries) and before the job's weights were loaded into it again is masked
        (`policy_server_restarted`)."""
        if self.served is None:
            return collected
        windows = self.served.unvouched()
        if not windows:
            return collected
        collected, rejected = list(collected), []
        for at, rollout in enumerate(collected):
            hits = [(span, window) for span in rollout.record.spans
                    for window in windows.get(span.replica, windows[None]) if window.covers(span)]
            if not hits:
                continue
            span, window = hits[0]
            verdict = Verdict.of(Rule.POLICY_SERVER_RESTARTED,
                                 f"span {span.request_index} was served by the policy server at {window.server}"
                                 f" {window.why} ({len({s.request_index for s, _ in hits})} such span(s))",
                                 span=span.request_index, server=window.server)
            episode = rollout.record.episode.model_copy(
                update={"verdicts": [*rollout.record.episode.verdicts, verdict]})
            collected[at] = dataclasses.replace(rollout, record=rollout.record.model_copy(update={"episode": episode}))
            rejected.append(rollout.record.rollout_id)
        if rejected:
            self.archive.log(f"step {step}: {len(rejected)} rollout(s) rejected, a policy server restarted while they"
                             f" ran (policy_server_restarted): {rejected[:5]}")
        return collected

    def _version_check(self, step: int, records: list[RolloutRecord]) -> dict[str, int]:
        expected = self.versions.expected(step)
        older = [(r.rollout_id, s.request_index, s.policy_version) for r in records for s in r.spans
                 if s.policy_version != expected]
        stale = [entry for entry in older if not 0 <= expected - entry[2] <= self.max_staleness]
        if stale:
            self.archive.log(f"step {step}: {len(stale)} spans not sampled by policy version {expected}"
                             f"{f' or the {self.max_staleness} before it' if self.max_staleness else ''}"
                             f" (rollout, span, version): {stale[:5]}")
        counts = {"policy_version/expected": expected, "policy_version/stale_spans": len(stale)}
        if self.max_staleness:
            counts["policy_version/off_policy_spans"] = len(older)
        return counts

    def _extra_logger(self, record: RolloutRecord) -> Callable[[str, list[Any]], None]:
        def log_extra(column: str, values: list[Any]) -> None:
            self.archive.log(f"reward log_extra {column} (rollout {record.rollout_id}): {values!r}"[:2000])

        return log_extra


class _StepIndex:
    """Rollout indices within one step's task, as the synchronous path numbers them (`rollouts.tasks`): two
    groups of one task taken by a step get 0..N-1 and N..2N-1, so neither overwrites the other's archive
    entry (keyed by step, task, rollout index). The producer cannot number them: it runs a group before
    knowing which step takes it."""

    def __init__(self) -> None:
        self._used: dict[int, int] = {}

    def next(self, group: FinishedGroup) -> int:
        index = self._used.get(group.task_index, 0)
        self._used[group.task_index] = index + 1
        return index


def _waste(kept: list[CollectedRollout], stale: list[CollectedRollout]) -> dict[str, float | int]:
    """What the step's stale groups cost and nobody trains on: their sampled tokens (and that as a fraction of
    everything the step's taken groups sampled) and their sandboxes' seconds."""
    wasted = sum(rollout.record.tokens.sampled for rollout in stale)
    sampled = wasted + sum(rollout.record.tokens.sampled for rollout in kept)
    return {"tokens/stale_dropped": wasted, "tokens/stale_dropped_fraction": wasted / sampled if sampled else 0.0,
            "sandbox_s/stale_dropped": round(sum(rollout.launch.duration_s for rollout in stale), 3)}


def _rollout_staleness(rollout: CollectedRollout, expected: int) -> int:
    """Versions between the rollout's own oldest span and the weights being trained (0 with no span)."""
    versions = [span.policy_version for span in rollout.record.spans]
    return expected - min(versions) if versions else 0


def _staleness(group: FinishedGroup, expected: int) -> int:
    """Versions between the group's oldest span and the weights being trained (0 for a group with no span)."""
    oldest = group.oldest_version
    return 0 if oldest is None else expected - oldest


def _metric_logger(logged: dict[str, list[float]]) -> Callable[[str, float], None]:
    def log_metric(name: str, value: float) -> None:
        logged.setdefault(name, []).append(float(value))

    return log_metric
