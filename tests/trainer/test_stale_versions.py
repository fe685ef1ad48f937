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
