"""A rollout with a branch (here a side call) on TRL 1.16's own batch code: the branch row lands in the
batch with its rollout's advantage, the logprobs the loss uses for it are the model's own for that row,
its importance ratio is trainer / sampler probability capped at the cap (as TRL's for its own rows), the
step's off-policy figures count its tokens, the other rollouts' advantages do not move, and every
sampled token is counted once in the loss."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from testkit.spans import make_span
from tests.trainer.records import EOS, model_logprobs, scored, two_turn_spans
from veri.core.episodes import RolloutStatus, RowKind, build_episode
from veri.core.rollout_record import RewardOutcome, RolloutRecord
from veri.loop.rewards import RewardFunction
from veri.services.trainer.grpo.branch_rows import BRANCH_ROWS_FIELD
from veri.services.trainer.grpo.config import CORRECTION
from veri.services.trainer.grpo.rewards import trl_reward_funcs
from veri.services.trainer.grpo.rows import MaskedRow, rollout_output
from veri.services.trainer.grpo.setup import seat_weight_sync
from veri.services.trainer.grpo.trainer import BRANCH_METRIC, TRUNCATED_METRIC, veri_trainer_class
from veri.services.trainer.schedule.tasks import task_key, trl_dataset
from veri.services.trainer.weights.sync import PushedAfterEachStep

SIDE_PROMPT, SIDE_COMPLETION = [70, 71, 72, 73, 74, 75], [80, 81, EOS]


def with_side_call(index: int, reward: float, side_logprobs: list[float]) -> RolloutRecord:
    """Rollout `index` of task 0: the main two-turn chain with a title-style side call between its turns."""
    first, second = two_turn_spans(index)
    side = make_span(1, SIDE_PROMPT, SIDE_COMPLETION, logprobs=side_logprobs)
    spans = [first, side, second.model_copy(update={"request_index": 2})]
    episode = build_episode(spans)
    assert [b.kind for b in episode.branches] == [RowKind.SIDE_CALL]
    outcome = RewardOutcome(reward=reward, per_function={"reward": reward})
    return RolloutRecord(rollout_id=f"r-0-{index}", task_index=0, rollout_index=index,
                         status=RolloutStatus.COMPLETED, spans=spans, episode=episode, reward=outcome)


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
    seat_weight_sync(trainer, PushedAfterEachStep())  # what the job does for hf: the correction runs
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    return trainer


def generate(trainer, records):
    return trainer._generate_and_score_completions([{"prompt": task_key(r.task_index)} for r in records])


# How far the side call's sampler logprobs are below the trainer's, per token: ratios e^0.5, e^-0.2 and e^2,
# the last above TRL's default cap (3.0), so a flipped sign or a missing cap changes what the test reads.
SIDE_OFF_POLICY = [0.5, -0.2, 2.0]
CAP = 3.0  # TRL's default vllm_importance_sampling_clip_max


def test_a_branch_row_is_trained_with_its_rollouts_advantage(tiny_model, tmp_path):
    own = model_logprobs(tiny_model, SIDE_PROMPT, SIDE_COMPLETION)
    sampled = [logprob - off for logprob, off in zip(own, SIDE_OFF_POLICY, strict=True)]
    plain = [scored(0, 1, 0.0), scored(0, 2, 0.5), scored(0, 3, 0.0)]
    records = [with_side_call(0, 1.0, sampled), *plain]
    trainer = make_trainer(tiny_model, tmp_path / "a", records)
    batch = generate(trainer, records)

    assert len(batch["advantages"]) == 5 and trainer._metrics["train"][BRANCH_METRIC] == [1.0]
    assert batch["advantages"][4] == batch["advantages"][0] > 0
    # The branch does not move anyone's advantage: the same group without it gives the same four.
    without = [records[0].model_copy(update={"episode": records[0].episode.model_copy(update={"branches": []})}),
               *plain]
    alone = generate(make_trainer(tiny_model, tmp_path / "b", without), without)
    torch.testing.assert_close(batch["advantages"][:4], alone["advantages"])

    # Its tokens, as the loss sees them: the side call's prompt, its sampled completion, all trained.
    branch = records[0].episode.branches[0].row
    width = len(branch.completion_ids)
    assert batch["completion_ids"][4, :width].tolist() == branch.completion_ids
    assert batch["prompt_ids"][4, -len(SIDE_PROMPT):].tolist() == SIDE_PROMPT
    loss_mask = batch["completion_mask"] * batch["tool_mask"]
    assert loss_mask[4].tolist() == [1] * width + [0] * (loss_mask.size(1) - width)
    sampled_tokens = sum(len(s.completion_token_ids) for r in records for s in r.spans)
    assert batch["num_items_in_batch"] == loss_mask.sum() == sampled_tokens  # every sampled token, once
    # The trainer's logprobs for the row are the model's own (padding and all); the sampler's are what the
    # span captured; the ratio is trainer / sampler probability, capped.
    torch.testing.assert_close(batch["old_per_token_logps"][4, :width], torch.tensor(own), atol=1e-5, rtol=0)
    torch.testing.assert_close(batch["sampling_per_token_logps"][4, :width], torch.tensor(sampled))
    expected = torch.tensor([math.exp(0.5), math.exp(-0.2), CAP])
    torch.testing.assert_close(batch["importance_sampling_ratio"][4, :width], expected, atol=1e-4, rtol=1e-4)

    loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    assert torch.isfinite(loss) and any(p.grad is not None and p.grad.abs().sum() > 0
                                        for p in trainer.model.parameters())


def test_the_steps_off_policy_figures_count_the_branch_rows_tokens(tiny_model, tmp_path):
    """TRL measures the ratio and the logprob difference over its own rows; the figures logged are over every
    row: here the main rows are on-policy (the trainer's own logprobs), so only the side call's tokens can
    move them."""
    own = model_logprobs(tiny_model, SIDE_PROMPT, SIDE_COMPLETION)
    side = [logprob - off for logprob, off in zip(own, SIDE_OFF_POLICY, strict=True)]
    records = [on_policy(tiny_model, with_side_call(0, 1.0, side)),
               *(on_policy(tiny_model, scored(0, index, float(index % 2))) for index in (1, 2, 3))]
    trainer = make_trainer(tiny_model, tmp_path, records)
    batch = generate(trainer, records)
    main = batch["importance_sampling_ratio"][:4][(batch["completion_mask"] * batch["tool_mask"])[:4].bool()]
    torch.testing.assert_close(main, torch.ones_like(main), atol=1e-4, rtol=0)  # TRL's rows: nothing to correct

    logged = {name: values[-1] for name, values in trainer._metrics["train"].items()}
    ratios = [1.0] * 20 + [math.exp(0.5), math.exp(-0.2), CAP]  # 5 sampled tokens in each main row, 3 in the side call
    assert logged["sampling/importance_sampling_ratio/max"] == pytest.approx(CAP, abs=1e-4)
    assert logged["sampling/importance_sampling_ratio/min"] == pytest.approx(math.exp(-0.2), abs=1e-4)
    assert logged["sampling/importance_sampling_ratio/mean"] == pytest.approx(sum(ratios) / len(ratios), abs=1e-4)
    assert logged["sampling/sampling_logp_difference/max"] == pytest.approx(2.0, abs=1e-4)
    assert logged["sampling/sampling_logp_difference/mean"] == pytest.approx(2.7 / 23, abs=1e-4)
    assert logged[TRUNCATED_METRIC] == pytest.approx(1 / 23)  # the side call's last token hit the cap


def on_policy(model_dir: Path, record: RolloutRecord) -> RolloutRecord:
    """The record with its main chain's sampled logprobs set to the model's own (a span's logprobs are the
    model's given everything before it: the prompt, and its completion so far)."""
    spans = []
    for span in record.spans:
        if span.request_index in record.episode.chain:
            logprobs = model_logprobs(model_dir, span.prompt_token_ids, span.completion_token_ids)
            span = span.model_copy(update={"completion_logprobs": logprobs})
        spans.append(span)
    return record.model_copy(update={"spans": spans, "episode": build_episode(spans)})


def test_the_batch_is_filled_to_split_evenly_and_a_masked_rollout_hands_over_no_branch(tiny_model, tmp_path):
    own = model_logprobs(tiny_model, SIDE_PROMPT, SIDE_COMPLETION)
    records = [with_side_call(0, 1.0, own), scored(0, 1, 0.0)]
    masked = records[0].model_copy(update={"reward": RewardOutcome(reward=None, per_function={"reward": None})})
    assert not masked.trainable
    output = rollout_output([masked, records[1]], MaskedRow(pad_id=0, eos_id=EOS), ["reward"])
    assert output[BRANCH_ROWS_FIELD] == [[], []]

    trainer = make_trainer(tiny_model, tmp_path, records, gradient_accumulation_steps=2)
    assert trainer.args.steps_per_generation == 2
    batch = generate(trainer, records)
    assert len(batch["advantages"]) == 4  # 2 rollouts + 1 branch row + 1 empty row: splits in two
    assert (batch["completion_mask"][3] == 0).all() and batch["advantages"][3] == 0
