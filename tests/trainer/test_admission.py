"""Asynchronous training's bound, kept at admission: with max_staleness k a group admitted while the
trainer is at step s is taken by step s + k at the latest (the step waits for it), so a slow group is
trained, not thrown away; a group that is stale all the same (a restarted server's spans, a straggler
that ran past `hold_step_s`) is dropped and counted. The real `GroupProducer` and `HarnessRollouts`;
the collector is a stand-in whose groups sample under the version the trainer's step serves."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from testkit.spans import make_span
from veri.core.episodes import RolloutStatus, build_episode
from veri.core.launch import LaunchResult
from veri.core.rollout_record import RolloutRecord
from veri.core.rules import Rule
from veri.loop.collect.collect import CollectedRollout
from veri.services.trainer.grpo.rollout_func import HarnessRollouts
from veri.services.trainer.schedule.producer import GroupProducer, GroupSchedule
from veri.services.trainer.weights.sync import PolicyVersions

pytestmark = pytest.mark.timeout(60)  # a step that waits for a group never released


def rollout(group: int, index: int, version: int, tokens: int = 3) -> CollectedRollout:
    rollout_id = f"g{group}-{index}"
    spans = [make_span(0, [10, 11], [20] * tokens, version=version)]
    record = RolloutRecord(rollout_id=rollout_id, task_index=0, rollout_index=index,
                           status=RolloutStatus.COMPLETED, spans=spans, episode=build_episode(spans))
    return CollectedRollout(record, LaunchResult(rollout_id=rollout_id, status=RolloutStatus.COMPLETED, exit_code=0,
                                                 started_at=0.0, duration_s=2.0))


@dataclass
class Groups:
    """Group n samples under the version served when it starts (the trainer's step), unless `versions`
    says otherwise (a restarted server's 0); a group in `held` runs until the test releases it."""

    rollouts: HarnessRollouts | None = None
    held: dict[int, threading.Event] = field(default_factory=dict)
    versions: dict[int, int] = field(default_factory=dict)
    started: list[int] = field(default_factory=list)
    tokens: dict[int, int] = field(default_factory=dict)  # sampled tokens per rollout (3 unless said)

    async def __call__(self, number: int, task_index: int) -> list[CollectedRollout]:
        import asyncio

        assert self.rollouts is not None
        self.started.append(number)
        version = self.versions.get(number, self.rollouts.step)
        while number in self.held and not self.held[number].is_set():
            await asyncio.sleep(0.01)
        return [rollout(number, index, version, self.tokens.get(number, 3)) for index in range(2)]


def async_rollouts(groups: Groups, *, max_steps: int, hold_step_s: float | None = None) -> HarnessRollouts:
    """max_staleness 1, one group of 2 rollouts per step, two groups running at once."""
    logged: list[str] = []
    rollouts = HarnessRollouts(tasks=[{}], collector=None, scorer=None,  # type: ignore[arg-type]
                               archive=SimpleNamespace(log=logged.append), progress=None,  # type: ignore[arg-type]
                               versions=PolicyVersions(), masked=None, max_parallel_rollouts=4,  # type: ignore[arg-type]
                               max_staleness=1, group_size=2, max_steps=max_steps, groups_per_step=1,
                               hold_step_s=hold_step_s)
    rollouts._remaining = max_steps
    rollouts.producer = GroupProducer(groups, GroupSchedule(1, seed=0), max_parallel_groups=2, max_staleness=1,
                                      groups_per_step=1, hold_step_s=hold_step_s)
    rollouts.logged = logged  # type: ignore[attr-defined]
    groups.rollouts = rollouts
    rollouts.producer.start()
    return rollouts


def step(rollouts: HarnessRollouts, number: int) -> tuple[list, dict, list]:
    rollouts.step = number
    return rollouts._take_step(number, 1)


def taken(kept: list[CollectedRollout]) -> set[str]:
    return {r.record.rollout_id.split("-")[0] for r in kept}


def test_a_slow_group_is_waited_for_at_its_deadline_and_trained_not_dropped():
    """Group 0 (admitted at step 0, due at step 1) is slow; group 2 (admitted at step 1) finishes first.
    Taking group 2 at step 1 would leave group 0 for step 2, two versions old: step 1 waits for group 0."""
    groups = Groups(held={0: threading.Event()})
    rollouts = async_rollouts(groups, max_steps=3)
    try:
        kept, extra, dropped = step(rollouts, 0)
        assert taken(kept) == {"g1"} and dropped == []
        threading.Timer(0.5, groups.held[0].set).start()  # group 2 starts and ends long before
        began = time.monotonic()
        kept, extra, dropped = step(rollouts, 1)
        assert time.monotonic() - began >= 0.4  # it waited for the due group
        assert taken(kept) == {"g0"} and dropped == [] and extra["staleness/max"] == 1
        kept, extra, dropped = step(rollouts, 2)
        assert taken(kept) == {"g2"} and dropped == [] and extra["staleness/max"] == 1
        assert extra["rollouts/stale_dropped"] == 0
    finally:
        rollouts.stop_producer()


def test_no_more_than_k_plus_one_steps_of_groups_are_admitted_beyond_what_was_taken():
    """The trainer behind (step 1 waits for its due group): groups for steps 1 and 2 run, none for step 3."""
    groups = Groups(held={n: threading.Event() for n in range(10)})
    rollouts = async_rollouts(groups, max_steps=10)
    try:
        groups.held[0].set()
        step(rollouts, 0)
        assert sorted(groups.started) == [0, 1]  # step 0's and step 1's
        waiting = threading.Thread(target=step, args=(rollouts, 1), daemon=True)
        waiting.start()
        time.sleep(0.5)
        assert sorted(groups.started) == [0, 1, 2] and waiting.is_alive()  # group 2, for step 2; no more
        groups.held[1].set()
        waiting.join(10)
        assert not waiting.is_alive()
    finally:
        rollouts.stop_producer()


def test_a_group_stale_all_the_same_is_dropped_counted_and_replaced():
    """A restarted hf server counts versions from 0 again: group 1's spans say version 0 although it was
    admitted at step 2, so at step 3 it is 3 versions old. Dropped (archived with the verdict, counted), and
    a replacement is admitted so the step still trains one group."""
    groups = Groups(versions={3: 0})
    rollouts = async_rollouts(groups, max_steps=6)
    try:
        steps = [step(rollouts, number) for number in range(4)]
    finally:
        rollouts.stop_producer()
    assert all(len(kept) == 2 for kept, _, _ in steps)  # every step trained one group
    dropped = [r for _, _, stale in steps for r in stale]
    assert {r.record.rollout_id for r in dropped} == {"g3-0", "g3-1"}
    assert all(r.record.episode.verdicts[-1].rule == Rule.POLICY_VERSION_STALE for r in dropped)
    assert sum(extra["rollouts/stale_dropped"] for _, extra, _ in steps) == 2
    assert sum(extra["groups/stale_dropped"] for _, extra, _ in steps) == 1
    assert any("dropped 1 group(s)" in line for line in rollouts.logged)  # type: ignore[attr-defined]


def test_a_straggler_past_hold_step_s_stops_holding_the_step_and_is_dropped_when_it_ends():
    groups = Groups(held={0: threading.Event()})
    rollouts = async_rollouts(groups, max_steps=4, hold_step_s=0.3)
    try:
        step(rollouts, 0)  # group 1
        kept, _, dropped = step(rollouts, 1)  # group 0 is due, runs past 0.3 s: group 2 instead
        assert taken(kept) == {"g2"} and dropped == []
        assert any("ran past 0.3 s" in line for line in rollouts.logged)  # type: ignore[attr-defined]
        groups.held[0].set()
        time.sleep(0.2)  # it ends now, sampled under version 0: at step 2 two versions old
        kept, extra, dropped = step(rollouts, 2)
        assert len(taken(kept)) == 1 and taken(kept) <= {"g3", "g4"}  # g4: the replacement of the dropped g0
        assert {r.record.rollout_id for r in dropped} == {"g0-0", "g0-1"}
        assert extra["rollouts/stale_dropped"] == 2
    finally:
        rollouts.stop_producer()


def test_the_waste_metrics_add_up_to_what_the_dropped_rollouts_sampled():
    """Group 3 (a restarted server's spans, 7 tokens a rollout) is dropped: its 14 sampled tokens and its
    sandboxes' 4 s are the step's waste, and the steps' tokens, kept and dropped, are everything sampled."""
    groups = Groups(versions={3: 0}, tokens={0: 5, 1: 4, 2: 6, 3: 7, 4: 2, 5: 9})
    rollouts = async_rollouts(groups, max_steps=6)
    try:
        steps = [step(rollouts, number) for number in range(4)]
    finally:
        rollouts.stop_producer()
    assert sum(extra["tokens/stale_dropped"] for _, extra, _ in steps) == 14
    assert sum(extra["sandbox_s/stale_dropped"] for _, extra, _ in steps) == 4.0
    [(kept, extra, dropped)] = [entry for entry in steps if entry[2]]
    kept_tokens = sum(len(span.completion_token_ids) for r in kept for span in r.record.spans)
    assert extra["tokens/stale_dropped_fraction"] == pytest.approx(14 / (14 + kept_tokens))
    taken_or_dropped = {r.record.rollout_id.split("-")[0] for kept, _, stale in steps for r in kept + stale}
    everything = sum(2 * groups.tokens[int(name[1:])] for name in taken_or_dropped)
    trained = sum(len(span.completion_token_ids) for kept, _, _ in steps for r in kept for span in r.record.spans)
    assert trained + sum(extra["tokens/stale_dropped"] for _, extra, _ in steps) == everything
    assert all(extra["tokens/stale_dropped"] == 0 and extra["sandbox_s/stale_dropped"] == 0
               for _, extra, stale in steps if not stale)
