"""`grpo.mask_truncated_completions` per rollout, on TRL 1.16's own batch code. TRL's flag masks the one
row in its slot when its last token is no EOS: the rollout's other rows (sub-agents, side calls) still
train, and a reply the client's stop sequence ended looks truncated. veri turns TRL's check off and masks a
rollout whole when any of its rows ends unfinished (`completion_truncated`), a stop-sequence end counting
as finished; the masked rollout's reward still counts in its group's baseline, as with TRL's flag."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from testkit.spans import make_span
from tests.core.jobs import job, make_job_dir, write_job
from tests.trainer.records import EOS, two_turn_spans
from veri.core.episodes import RolloutStatus, RowKind, build_episode, truncate_episode, unfinished_rows
from veri.core.rollout_record import RewardOutcome, RolloutRecord
from veri.core.rules import Effect, Rule
from veri.loop.rewards import RewardFunction
from veri.services.trainer.grpo.branch_rows import BRANCH_ROWS_FIELD
from veri.services.trainer.grpo.config import CORRECTION, job_grpo_kwargs, masks_truncated
from veri.services.trainer.grpo.rewards import trl_reward_funcs
from veri.services.trainer.grpo.rollout_func import HarnessRollouts
from veri.services.trainer.grpo.rows import REWARDS_FIELD, MaskedRow, rollout_output
from veri.services.trainer.grpo.setup import seat_weight_sync
from veri.services.trainer.grpo.trainer import veri_trainer_class
from veri.services.trainer.schedule.tasks import task_key, trl_dataset
from veri.services.trainer.validation_hook import TRAINER_CHECKS
from veri.services.trainer.weights.sync import PushedAfterEachStep
from veri.validation.run import load_config

SIDE_PROMPT = [70, 71, 72, 73]
NOT_EOS = 81


def rollout(index: int, reward: float, *, final: dict | None = None, side: dict | None = None) -> RolloutRecord:
    """Rollout `index` of task 0: two bridged calls, a side call between them when `side` is given (its span's
    fields); `final`: fields of the last call (how it ended)."""
    first, second = two_turn_spans(index)
    spans = [first]
    if side is not None:
        spans.append(make_span(1, SIDE_PROMPT, [80, EOS]).model_copy(update=side))
    spans.append(second.model_copy(update={"request_index": len(spans), **(final or {})}))
    episode = build_episode(spans)
    return RolloutRecord(rollout_id=f"r-0-{index}", task_index=0, rollout_index=index,
                         status=RolloutStatus.COMPLETED, spans=spans, episode=episode,
                         reward=RewardOutcome(reward=reward, per_function={"reward": reward}))


# The policy hit its token limit: the ids end on an ordinary token.
CUT = {"finish_reason": "length", "completion_token_ids": [40, NOT_EOS], "completion_logprobs": [-2.0, -1.0]}
# The client's stop sequence ended the reply: the proxy cut the ids after it (no EOS), the policy ran on.
STOPPED = {**CUT, "stop_sequence": "\n\n"}


def group() -> list[RolloutRecord]:
    return [rollout(0, 1.0, final=CUT, side={}),  # its final reply cut: its side call must not train either
            rollout(1, 0.0, final=STOPPED),  # ended by the client's stop sequence: finished
            rollout(2, 0.5, side=CUT),  # its side call cut: the rollout is masked, its final answer too
            rollout(3, 0.0, side={})]


def mask(records: list[RolloutRecord], on: bool = True) -> list[RolloutRecord]:
    rollouts = SimpleNamespace(mask_truncated=on)
    return [HarnessRollouts._mask_truncated(rollouts, record) for record in records]  # type: ignore[arg-type]


def test_a_rollout_with_any_unfinished_row_is_masked_whole_and_a_stop_sequence_is_finished():
    records = group()
    assert [r.episode.branches[0].kind for r in records if r.episode.branches] == [RowKind.SIDE_CALL] * 3
    assert unfinished_rows(records[1].episode, records[1].spans) == []
    assert unfinished_rows(records[3].episode, records[3].spans) == []

    masked = mask(records)
    verdicts = [[v for v in r.episode.verdicts if v.rule == Rule.COMPLETION_TRUNCATED] for r in masked]
    assert [len(found) for found in verdicts] == [1, 0, 1, 0]
    assert verdicts[0][0].effect == Effect.MASK
    assert verdicts[0][0].message.startswith("the row ends with span 2, which the policy cut (finish_reason length)")
    assert verdicts[2][0].message.startswith("the side_call row from span 1 ends with span 1, which the policy cut")
    assert [(r.trainable, r.rewarded) for r in masked] == [(False, True), (True, True), (False, True), (True, True)]
    account = masked[0].tokens
    assert (account.trained, account.dropped) == (0, {"completion_truncated": account.sampled})
    assert mask(records, on=False) == records  # the job did not ask for it


def test_a_row_cut_at_max_response_length_is_unfinished():
    record = rollout(3, 0.0)
    assert unfinished_rows(record.episode, record.spans) == []
    cut = truncate_episode(record.episode, 4)
    [message] = unfinished_rows(cut, record.spans)
    assert "more than max_response_length=4" in message


def test_the_masked_rollouts_rows_leave_the_loss_and_their_rewards_stay_in_the_baseline(tiny_model, tmp_path):
    masked = mask(group())
    output = rollout_output(masked, MaskedRow(pad_id=0, eos_id=EOS), ["reward"])
    assert output[REWARDS_FIELD] == [{"reward": 1.0}, {"reward": 0.0}, {"reward": 0.5}, {"reward": 0.0}]
    assert [len(rows) for rows in output[BRANCH_ROWS_FIELD]] == [0, 0, 0, 1]  # only rollout 3's side call
    assert output["env_mask"][0] == [0] and output["env_mask"][2] == [0]

    batch = generate(make_trainer(tiny_model, tmp_path / "veri", masked), masked)
    trained = batch["completion_mask"] * batch["tool_mask"]
    assert trained[[0, 2]].sum() == 0  # nothing of rollouts 0 and 2
    assert trained[1].sum() == 5 and trained[3].sum() == 5 and trained[4].sum() == 2  # rollout 3's side call row
    assert batch["num_items_in_batch"] == 12

    # The group's advantages are what they are with nothing masked: the masked rewards still count.
    plain = generate(make_trainer(tiny_model, tmp_path / "plain", group()), group())
    torch.testing.assert_close(batch["advantages"][:4], plain["advantages"][:4])
    assert batch["advantages"][0] != 0  # rollout 0 had the best reward: masked from the loss, not from the baseline


def test_trls_own_flag_masks_a_stop_sequence_and_trains_a_cut_rollouts_other_rows(tiny_model, tmp_path):
    """Why veri keeps TRL's check off: on the same rollouts, unmasked by veri, TRL's per-row flag masks the
    finished stop-sequence reply and trains the side call of the rollout whose final reply was cut."""
    records = group()
    batch = generate(make_trainer(tiny_model, tmp_path, records, mask_truncated_completions=True), records)
    trained = batch["completion_mask"] * batch["tool_mask"]
    assert trained[0].sum() == 0 and trained[1].sum() == 0  # the cut reply, and the stop-sequence one
    side_rows = batch["completion_ids"][4:, :2].tolist()
    assert [80, EOS] in side_rows and trained[4:].sum() > 0  # rollout 0's side call (row 4) is trained


@pytest.mark.parametrize("asked", [True, False])
def test_the_job_setting_goes_to_veri_and_trls_own_check_stays_off(tmp_path: Path, asked: bool):
    job_dir = make_job_dir(tmp_path)
    config = load_config(write_job(job_dir, job(grpo={"mask_truncated_completions": asked})), base_dir=job_dir,
                         trainer_checks=TRAINER_CHECKS)
    assert masks_truncated(config) is asked
    assert job_grpo_kwargs(config)["mask_truncated_completions"] is False


def make_trainer(model: Path, out: Path, records: list[RolloutRecord], **config):
    from transformers import AutoTokenizer
    from trl import GRPOConfig

    tokenizer = AutoTokenizer.from_pretrained(model)
    masked = MaskedRow(pad_id=tokenizer.pad_token_id, eos_id=tokenizer.eos_token_id)
    funcs, weights = trl_reward_funcs([RewardFunction.wrap("reward", lambda **kw: None)])

    def rollout_func(prompts, trainer):
        return rollout_output(records, masked, ["reward"])

    args = GRPOConfig(output_dir=str(out), use_cpu=True, bf16=False, num_generations=len(records),
                      per_device_train_batch_size=len(records), max_completion_length=16, report_to="none",
                      reward_weights=weights, **CORRECTION, **config)
    trainer = veri_trainer_class()(model=str(model), reward_funcs=funcs, args=args, train_dataset=trl_dataset([{}]),
                                   processing_class=tokenizer, rollout_func=rollout_func)
    seat_weight_sync(trainer, PushedAfterEachStep())
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    return trainer


def generate(trainer, records: list[RolloutRecord]) -> dict:
    return trainer._generate_and_score_completions([{"prompt": task_key(r.task_index)} for r in records])
