"""A small job archive written by the trainer's own writer (`JobArchive`): three completed steps and a step
the job stopped in, with trained rollouts (one with a side call: two rows), a rejected one, an unscored one."""

from __future__ import annotations

from pathlib import Path

from testkit.spans import make_span
from tests.trainer.records import failed, scored
from veri.archive import JobArchive, step_metrics
from veri.core.episodes import RolloutStatus, build_episode
from veri.core.rollout_record import RewardOutcome, RolloutRecord

JOB = "job-sft"
MESSAGES = [{"role": "system", "content": "You answer."}, {"role": "user", "content": "task"}]


def with_messages(record: RolloutRecord) -> RolloutRecord:
    """The record's spans carry rendered messages and replies, as the proxy records them."""
    spans = [span.model_copy(update={"messages": MESSAGES, "reply_message": {"role": "assistant",
                                                                             "content": f"reply {span.request_index}"}})
             for span in record.spans]
    return record.model_copy(update={"spans": spans, "episode": build_episode(spans)})


def side_call(task: int, index: int, reward: float) -> RolloutRecord:
    """Two rows: the main chain (spans 0 and 2) and a side call (span 1, another system prompt)."""
    side_messages = [{"role": "system", "content": "You write short titles."}, {"role": "user", "content": "t"}]
    spans = [make_span(0, [1, 2], [3, 99], messages=MESSAGES, reply="first"),
             make_span(1, [7, 8], [9, 99], messages=side_messages, reply="a title"),
             make_span(2, [1, 2, 3, 99, 5], [6, 99], bridged_from=0, messages=MESSAGES, reply="answer")]
    return RolloutRecord(rollout_id=f"r-{task}-{index}", task_index=task, rollout_index=index, spans=spans,
                         status=RolloutStatus.COMPLETED, episode=build_episode(spans),
                         reward=RewardOutcome(reward=reward, per_function={"reward": reward}))


def steps() -> dict[int, list[RolloutRecord]]:
    return {
        0: [with_messages(scored(0, 0, 1.0)), with_messages(scored(0, 1, 0.0)), failed(1, 0)],
        1: [side_call(2, 0, 0.5), with_messages(scored(2, 1, None))],  # the second: a reward_error (masked)
        2: [with_messages(scored(3, 0, 1.0)), with_messages(scored(3, 1, 0.25))],
        3: [with_messages(scored(4, 0, 1.0))],  # the step the job stopped in: no metrics line
    }


def write_archive(root: Path) -> Path:
    with JobArchive(root, JOB) as archive:
        for step, records in steps().items():
            for record in records:
                archive.write_rollout(step, record)
            if step < 3:
                archive.write_step_metrics(step, step_metrics(records, {"rollout": 1.0}))
    return root / JOB

