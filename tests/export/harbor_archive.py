"""A small job archive of Harbor-task rollouts, as the trainer writes it: each record carries its task's row
(`harbor_row` of a real task folder), the verifier's result and the episode built with it, and a reward
scored by the job's functions: the built-in `verifier` reward plus a function of the job's own that gives 1
to every rollout, weighted 0.5 (so the reward is the tests' reward + 0.5, and a rollout whose tests could
not run still gets a number: 0.5)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testkit.spans import make_span
from veri.archive import JobArchive, step_metrics
from veri.core.config import VERIFIER_REWARD, RewardConfig
from veri.core.dataset import PROMPT, harbor_row
from veri.core.episodes import RolloutStatus, build_episode
from veri.core.harbor_task import load_task
from veri.core.launch import VerifierResult
from veri.core.rollout_record import RolloutRecord, VerifierRecord
from veri.core.rules import VerifierError
from veri.loop.rewards.functions import RewardInputs
from veri.loop.rewards.loading import load_reward_functions
from veri.loop.rewards.scoring import RewardScorer

REPO = Path(__file__).resolve().parents[2]
COPY_TASK = REPO / "config/data/harbor_cpu/train/copy-apple-to-violet"  # reward.txt; [metadata] family, difficulty
JSON_TASK = REPO / "tests/fixtures/harbor/veri/reward-json"  # reward.json; [metadata] difficulty, category
JOB = "job-harbor"
EVERY_ROLLOUT_ONE = "def reward(completions, **kwargs):\n    return [1.0]\n"
REWARDS = [RewardConfig(builtin=VERIFIER_REWARD), RewardConfig(source=EVERY_ROLLOUT_ONE, weight=0.5)]


def passed(reward: float, **keys: float) -> VerifierResult:
    return VerifierResult(exit_code=0, reward=reward, rewards={**keys, "reward": reward}, duration_s=1.5)


def could_not_run(error: VerifierError) -> VerifierResult:
    return VerifierResult(error=error, message=f"the tests: {error.value}", exit_code=1, duration_s=2.0)


def harbor_rollout(task_index: int, index: int, row: dict[str, Any], verifier: VerifierResult) -> RolloutRecord:
    """A completed two-call rollout of a task, verified as `verifier` says (unscored: see `scored`)."""
    messages = [{"role": "system", "content": "You run shell commands."}, {"role": "user", "content": row[PROMPT]}]
    seed = task_index * 10 + index
    first = make_span(0, [10 + seed, 11, 12], [20 + seed, 21, 99], messages=messages, reply="ls")
    second = make_span(1, [*first.prompt_token_ids, *first.completion_token_ids, 30, 31], [40 + seed, 99],
                       bridged_from=0, messages=messages, reply="done")
    spans = [first, second]
    return RolloutRecord(rollout_id=f"h-{task_index}-{index}", task_index=task_index, rollout_index=index, task=row,
                         status=RolloutStatus.COMPLETED, spans=spans, episode=build_episode(spans, verifier=verifier),
                         verifier=VerifierRecord.of(verifier))


def scored(records: list[RolloutRecord]) -> list[RolloutRecord]:
    """Each record with the reward the job's functions give it (as the trainer scores a step)."""
    columns = sorted({key for record in records for key in record.task if key != PROMPT})
    with RewardScorer(load_reward_functions(REWARDS, columns), 30.0) as scorer:
        outcomes = scorer.score_many([RewardInputs.from_record(record) for record in records])
    return [record.model_copy(update={"reward": outcome}) for record, outcome in zip(records, outcomes, strict=True)]


def steps() -> dict[int, list[RolloutRecord]]:
    copy_row, json_row = harbor_row(load_task(COPY_TASK)), harbor_row(load_task(JSON_TASK))
    return {
        0: scored([harbor_rollout(0, 0, copy_row, passed(1.0)), harbor_rollout(0, 1, copy_row, passed(0.0)),
                   harbor_rollout(0, 2, copy_row, could_not_run(VerifierError.NO_REWARD))]),
        1: scored([harbor_rollout(1, 0, json_row, passed(0.5, correctness=1.0)),
                   harbor_rollout(1, 1, json_row, could_not_run(VerifierError.TIMEOUT)),
                   harbor_rollout(1, 2, json_row, passed(1.0, correctness=1.0))]),
    }


def write_archive(root: Path) -> Path:
    with JobArchive(root, JOB) as archive:
        for step, records in steps().items():
            for record in records:
                archive.write_rollout(step, record)
            archive.write_step_metrics(step, step_metrics(records, {"rollout": 1.0}))
    return root / JOB
