"""The rollout function on a real stack: local sandboxes running an OpenAI-SDK harness, a capture proxy,
a policy server (scripted replies), reward functions on the harness's output folder, the archive."""

from __future__ import annotations

from types import SimpleNamespace

import httpx
import pytest
from transformers import AutoTokenizer

from testkit.trainer_jobs import write_job
from tests.trainer.conftest import build_rollouts
from veri.archive import JobArchive
from veri.core.rules import Rule
from veri.loop.rewards import RewardScorer, load_reward_functions
from veri.services.trainer.schedule.tasks import task_key
from veri.validation.run import load_config

pytestmark = pytest.mark.needs("process")


class WatchedDisplay:
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def print(self, line: str) -> None:
        self.events.append(("line", line))

    def rollouts_started(self, step: int, total: int) -> None:
        self.events.append(("started", step, total))

    def rollouts_done(self, count: int) -> None:
        self.events.append(("done", count))


def test_a_batch_becomes_rows_rewards_and_archived_records(stack, tiny_model, tmp_path):
    _, proxy = stack
    config = load_config(write_job(tmp_path / "job", tiny_model), base_dir=tmp_path / "job")
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    trainer = SimpleNamespace(state=SimpleNamespace(global_step=0), num_generations=2)  # what TRL passes

    with (JobArchive(tmp_path / "archive", "job") as archive,
          RewardScorer(load_reward_functions(config.rewards), 30) as scorer):
        rollouts = build_rollouts(config, proxy.url, tokenizer, archive, scorer, tmp_path / "outputs")
        rollouts.progress.display = watched = WatchedDisplay()
        output = rollouts([task_key(1), task_key(1), task_key(0), task_key(0)], trainer)
        rollouts.progress.flush()
        [metrics] = archive.metrics()
        rows = archive.rollouts(step=0)
        records = [archive.read_rollout(row["path"]) for row in rows]
        logs = {row["rollout_id"]: (archive.dir / row["path"]).with_suffix(".log").read_text() for row in rows}

    # Rows, in TRL's order: task 1 (its second rollout crashed), then task 0.
    assert len(output["completion_ids"]) == 4
    eos = tokenizer.eos_token_id
    for i in (0, 2, 3):
        ids, mask, logprobs = output["completion_ids"][i], output["env_mask"][i], output["logprobs"][i]
        assert ids[-1] == eos and mask[-1] == 1  # ends with the model's EOS, a sampled token
        assert len(ids) == len(mask) == len(logprobs)
        environment = [j for j, m in enumerate(mask) if m == 0]
        assert environment and environment[0] > 0 and max(environment) < len(mask) - 1  # the bridged tool turn
        assert all(logprobs[j] == 0.0 for j in environment)
        assert all(logprobs[j] < 0.0 for j, m in enumerate(mask) if m == 1)
        assert "veri-answer" in tokenizer.decode([ids[j] for j in environment])
    assert output["env_mask"][1] == [0] and output["completion_ids"][1] == [eos]  # masked placeholder

    # Rewards: rollout 1 of a group answers "beta beta" (reward 1), rollout 0 "alpha" (0); the crash: None.
    assert output["veri_rewards"] == [{"reward": 0.0}, {"reward": None}, {"reward": 0.0}, {"reward": 1.0}]

    # The archive has every record, the crash with its verdict and log, and the step's metrics.
    by_key = {(r.task_index, r.rollout_index): r for r in records}
    assert sorted(by_key) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    crashed = by_key[(1, 1)]
    assert not crashed.trainable and crashed.reward is None
    failed, none = crashed.verdicts  # it crashed before its first model call
    assert (failed.rule, none.rule) == (Rule.HARNESS_FAILED, Rule.NO_SPANS)
    assert "crashes on purpose" in failed.details["stderr_tail"]
    assert "crashes on purpose" in logs[crashed.rollout_id] and "answer: beta beta" in logs[by_key[(0, 1)].rollout_id]
    good = by_key[(0, 1)]
    assert good.trainable and len(good.spans) == 2 and good.episode.chain == [0, 1]
    assert output["prompt_ids"][3] == good.spans[0].prompt_token_ids
    assert all(span.policy_version == 0 for r in records for span in r.spans)
    assert metrics["rollouts"] == 4 and metrics["trainable"] == 3 and metrics["rule/harness_failed"] == 1
    assert metrics["policy_version/stale_spans"] == 0 and metrics["time/rollout_s"] > 0
    assert (tmp_path / "outputs" / good.rollout_id / "answer.txt").read_text() == "beta beta"

    # The progress bars saw the step's rollouts come back, group by group.
    assert watched.events[:3] == [("started", 0, 4), ("done", 2), ("done", 2)]
    assert watched.events[3][1].startswith("step 0: 3/4 rollouts trainable")  # the step's line, after them

    # Sessions are closed once the rollouts end (a late call would get 409).
    for record in records:
        assert httpx.get(f"{proxy.url}/control/sessions/{record.rollout_id}").json()["status"] == "closed"
