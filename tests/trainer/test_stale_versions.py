"""A rollout with a span another policy version sampled (an hf policy server that restarted mid-step counts
from 0 again; a group older than max_staleness) is masked by `policy_version_stale`, not trained on as the
step's policy's; the asynchronous path drops a stale group and takes a fresh one in its place. (A restarted
server is caught by its process too, whatever its spans carry: tests/trainer/test_served.py.)"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from testkit.spans import make_span
from veri.core.episodes import RolloutStatus, build_episode
from veri.core.launch import LaunchResult
from veri.core.rollout_record import RolloutRecord
from veri.core.rules import Effect, Rule
from veri.loop.collect.collect import CollectedRollout
from veri.services.trainer.grpo.rollout_func import HarnessRollouts
from veri.services.trainer.schedule.producer import GroupProducer, GroupSchedule
from veri.services.trainer.weights.sync import PolicyVersions


def collected(first: int, second: int) -> CollectedRollout:
    """A two-call rollout whose calls were sampled by policy versions `first` and `second`."""
    spans = [make_span(0, [10, 11], [20, 21, 5], version=first),
             make_span(1, [10, 11, 20, 21, 5, 30], [40, 5], bridged_from=0, version=second)]
    record = RolloutRecord(rollout_id="r-0-0", task_index=0, rollout_index=0, status=RolloutStatus.COMPLETED,
                           spans=spans, episode=build_episode(spans))
    return CollectedRollout(record, LaunchResult(rollout_id="r-0-0", status=RolloutStatus.COMPLETED, exit_code=0,
                                                 started_at=0.0, duration_s=1.0))


def reject_stale(step: int, rollout: CollectedRollout, offset: int = 0, max_staleness: int = 0) -> CollectedRollout:
    rollouts = SimpleNamespace(versions=PolicyVersions(offset), max_staleness=max_staleness)
    return HarnessRollouts._reject_stale(rollouts, step, rollout)  # type: ignore[arg-type]


def test_spans_of_the_steps_version_pass_unchanged():
    rollout = collected(3, 3)
    assert reject_stale(3, rollout) is rollout
    assert reject_stale(1, collected(3, 3), offset=2).record.episode.verdicts == []  # a resumed job's offset


def test_a_span_of_another_version_masks_the_rollout():
    rollout = reject_stale(3, collected(3, 0))  # the server restarted between the two calls
    [verdict] = rollout.record.episode.verdicts
    assert (verdict.rule, verdict.effect, verdict.span) == (Rule.POLICY_VERSION_STALE, Effect.REJECT, 1)
    assert verdict.details == {"expected": 3, "versions": [0]}
    assert "sampled by policy version 0, step 3 by version 3" in verdict.message
    assert rollout.record.episode.rejected and not rollout.record.trainable


def test_with_max_staleness_a_span_within_the_bound_passes_and_an_older_one_masks():
    assert reject_stale(3, collected(3, 2), max_staleness=1).record.episode.verdicts == []
    [verdict] = reject_stale(3, collected(3, 1), max_staleness=1).record.episode.verdicts
    assert verdict.rule == Rule.POLICY_VERSION_STALE and verdict.details["versions"] == [1]
    # a span *newer* than the weights being trained cannot come from this job's loop: masked too
    assert reject_stale(3, collected(3, 4), max_staleness=1).record.episode.verdicts


# Group number -> the versions of its rollouts' two calls. The real producer runs them one at a time (so they
# finish in this order); group 1 is 2 versions behind version 3, past max_staleness 1.
GROUP_VERSIONS = {0: (3, 3), 1: (1, 2), 2: (2, 3), 3: (3, 3)}


@pytest.mark.timeout(60)  # a producer that starts no replacement leaves the step waiting
def test_a_step_drops_a_stale_group_takes_the_next_in_its_place_and_numbers_every_rollout():
    """The real `GroupProducer`: the step wants 3 groups, group 1 is stale, so the producer starts one more
    and the step still trains 3. Every group here is task 0 (a step can get one task twice: its last group
    of an epoch and the first of the next), so each rollout keeps its own archive entry (keyed by step, task,
    rollout index), the dropped ones included, as the synchronous path numbers repeated tasks."""
    started: list[int] = []

    async def run_group(number: int, task_index: int) -> list[CollectedRollout]:
        started.append(number)
        return [collected(*GROUP_VERSIONS.get(number, (3, 3))) for _ in range(2)]

    logged: list[str] = []
    rollouts = HarnessRollouts(tasks=[{}], collector=None, scorer=None,  # type: ignore[arg-type]
                               archive=SimpleNamespace(log=logged.append), progress=None,  # type: ignore[arg-type]
                               versions=PolicyVersions(), masked=None, max_parallel_rollouts=2,  # type: ignore[arg-type]
                               max_staleness=1, group_size=2, max_steps=2, groups_per_step=3)
    rollouts._remaining = 3  # the job's last step: no group is started past it but a dropped one's replacement
    rollouts.producer = GroupProducer(run_group, GroupSchedule(1, seed=0), max_parallel_groups=1)
    rollouts.producer.start()
    try:
        kept, extra, dropped = rollouts._take_step(3, 3)
    finally:
        rollouts.stop_producer()
    assert len(kept) == 6 and len(dropped) == 2  # three groups trained, one dropped
    assert [(r.record.task_index, r.record.rollout_index, r.record.staleness) for r in kept] == [
        (0, 0, 0), (0, 1, 0), (0, 2, 1), (0, 3, 1), (0, 4, 0), (0, 5, 0)]
    assert [(r.record.rollout_index, r.record.staleness, r.record.policy_step) for r in dropped] == [
        (6, 2, 3), (7, 2, 3)]
    assert all(r.record.episode.verdicts[-1].rule == Rule.POLICY_VERSION_STALE for r in dropped)
    assert started == [0, 1, 2, 3]  # the step's three, and one in place of the dropped
    assert extra["staleness/groups_0"] == 2 and extra["staleness/groups_1"] == 1
    assert extra["groups/stale_dropped"] == 1 and extra["rollouts/stale_dropped"] == 2
    assert "dropped 1 group(s)" in logged[0]
