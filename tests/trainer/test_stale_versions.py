"""A rollout with a span another policy version sampled (a policy server restarted with its original
weights mid-step) is masked by `policy_version_stale`, not trained on as the step's policy's."""

from __future__ import annotations

from types import SimpleNamespace

from tests.core.spans import make_span
from veri.core.episodes import Effect, RolloutStatus, Rule, build_episode
from veri.core.launch import LaunchResult
from veri.core.rollouts import RolloutRecord
from veri.rollouts.collect import CollectedRollout
from veri.trainer.grpo.rollout_func import HarnessRollouts
from veri.trainer.rollouts.producer import FinishedGroup
from veri.trainer.weights.sync import PolicyVersions


def collected(*versions: int | None) -> CollectedRollout:
    first = make_span(0, [10, 11], [20, 21, 5], version=versions[0] or 0)
    second = make_span(1, [10, 11, 20, 21, 5, 30], [40, 5], bridged_from=0, version=versions[1] or 0)
    spans = [first, second]
    for span, version in zip(spans, versions, strict=True):
        span.policy_version = version
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


def test_a_span_without_a_version_is_left_to_the_other_rules():
    assert reject_stale(3, collected(3, None)).record.episode.verdicts == []


def test_with_max_staleness_a_span_within_the_bound_passes_and_an_older_one_masks():
    assert reject_stale(3, collected(3, 2), max_staleness=1).record.episode.verdicts == []
    [verdict] = reject_stale(3, collected(3, 1), max_staleness=1).record.episode.verdicts
    assert verdict.rule == Rule.POLICY_VERSION_STALE and verdict.details["versions"] == [1]
    # a span *newer* than the weights being trained cannot come from this job's loop: masked too
    assert reject_stale(3, collected(3, 4), max_staleness=1).record.episode.verdicts


class TakesGivenGroups:
    """The producer's side of a step: these groups finished, in this order."""

    def __init__(self, groups: list[FinishedGroup]) -> None:
        self.groups = groups

    def allow(self, upto: int) -> None:
        pass

    def take(self, count: int, fresh_enough) -> tuple[list[FinishedGroup], list[FinishedGroup]]:
        taken = self.groups[:count]
        return [g for g in taken if fresh_enough(g)], [g for g in taken if not fresh_enough(g)]


def test_two_groups_of_one_task_in_one_step_get_distinct_rollout_indices():
    """The async path takes whichever groups finish first, so a step can get one task twice (its last
    group of an epoch and the first of the next); each of its rollouts keeps its own archive entry (keyed by
    step, task, rollout index), dropped ones included, as the synchronous path numbers repeated tasks."""
    def group(number: int, *versions: int) -> FinishedGroup:
        return FinishedGroup(number, 0, [collected(*versions), collected(*versions)], 0.0, 1.0)

    logged: list[str] = []
    rollouts = HarnessRollouts(tasks=[{}], collector=None, scorer=None,  # type: ignore[arg-type]
                               archive=SimpleNamespace(log=logged.append), progress=None,  # type: ignore[arg-type]
                               versions=PolicyVersions(), masked=None, max_parallel_rollouts=4,  # type: ignore[arg-type]
                               max_staleness=1, group_size=2, max_steps=5, groups_per_step=3,
                               producer=TakesGivenGroups([group(5, 3, 3), group(6, 2, 3), group(7, 1, 2)]))
    rollouts._remaining = 15
    kept, extra, dropped = rollouts._take_step(3, 3)
    assert [(r.record.task_index, r.record.rollout_index, r.record.staleness) for r in kept] == [
        (0, 0, 0), (0, 1, 0), (0, 2, 1), (0, 3, 1)]
    assert [(r.record.rollout_index, r.record.staleness, r.record.policy_step) for r in dropped] == [
        (4, 2, 3), (5, 2, 3)]
    assert extra["staleness/groups_0"] == 1 and extra["staleness/groups_1"] == 1 and extra["groups/stale_dropped"] == 1
    assert "dropped 1 group(s)" in logged[0]
