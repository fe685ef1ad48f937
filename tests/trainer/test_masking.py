"""Masked rollouts against TRL 1.16's own advantage and loss code: a failed member adds nothing to the
loss and leaves its group's survivors with exactly the advantages they get without it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from tests.trainer.records import failed, scored
from veri.core.episodes import RolloutStatus
from veri.core.rollout_record import RolloutRecord
from veri.loop.rewards import RewardFunction
from veri.services.trainer.grpo.rewards import trl_reward_funcs
from veri.services.trainer.grpo.rows import MaskedRow, rollout_output
from veri.services.trainer.schedule.tasks import task_key, trl_dataset


def group_a() -> list[RolloutRecord]:
    """Four members; the second one's harness crashed."""
    return [scored(0, 0, 1.0), failed(0, 1), scored(0, 2, 0.0), scored(0, 3, 0.5)]


def group_b() -> list[RolloutRecord]:
    """Four members, every one masked, each by a different rule."""
    return [failed(1, 0), failed(1, 1, RolloutStatus.TRUNCATED), failed(1, 2, RolloutStatus.COMPLETED, spans=False),
            scored(1, 3, None)]


def make_trainer(model: Path, out: Path, records: list[RolloutRecord], group_size: int, **config):
    """A real GRPOTrainer whose rollout function returns `records` as veri's rows."""
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(model)
    masked = MaskedRow(pad_id=tokenizer.pad_token_id, eos_id=tokenizer.eos_token_id)
    funcs, weights = trl_reward_funcs([RewardFunction.wrap("reward", lambda **kw: None)])

    def rollout_func(prompts, trainer):
        assert len(prompts) == len(records)
        return rollout_output(records, masked, ["reward"])

    args = GRPOConfig(output_dir=str(out), use_cpu=True, bf16=False, num_generations=group_size,
                      per_device_train_batch_size=len(records), max_completion_length=16, report_to="none",
                      reward_weights=weights, **config)
    trainer = GRPOTrainer(model=str(model), reward_funcs=funcs, args=args, train_dataset=trl_dataset([{}, {}]),
                          processing_class=tokenizer, rollout_func=rollout_func)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop; the loss reads it
    return trainer


def generate(trainer, records: list[RolloutRecord]) -> dict:
    return trainer._generate_and_score_completions([{"prompt": task_key(r.task_index)} for r in records])


def loss_and_grads(trainer, batch: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    trainer.model.zero_grad()
    loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_failed_members_leave_survivors_advantages_unchanged(tiny_model, tmp_path, scale_rewards):
    batch = [*group_a(), *group_b()]
    survivors = [r for r in group_a() if r.trainable]
    trainer = make_trainer(tiny_model, tmp_path / "a", batch, 4, scale_rewards=scale_rewards)
    alone = make_trainer(tiny_model, tmp_path / "b", survivors, 3, scale_rewards=scale_rewards)

    advantages = generate(trainer, batch)["advantages"]
    expected = generate(alone, survivors)["advantages"]

    assert torch.isfinite(advantages).all()
    torch.testing.assert_close(advantages[[0, 2, 3]], expected)
    assert advantages[1] == 0 and (advantages[4:] == 0).all()  # masked: no signal, and no NaN
    assert expected.abs().sum() > 0  # the survivors do learn something


def test_masked_rows_add_nothing_to_the_loss(tiny_model, tmp_path):
    batch = [*group_a(), *group_b()]
    survivors = [r for r in group_a() if r.trainable]
    trainer = make_trainer(tiny_model, tmp_path / "a", batch, 4)
    alone = make_trainer(tiny_model, tmp_path / "b", survivors, 3)
    inputs = generate(trainer, batch)

    loss_mask = inputs["completion_mask"] * inputs["tool_mask"]  # what TRL's loss multiplies by
    assert loss_mask[[1, 4, 5, 6, 7]].sum() == 0
    assert loss_mask[0].tolist()[:6] == [1, 1, 1, 0, 0, 0]  # environment tokens are masked too

    loss, grads = loss_and_grads(trainer, inputs)
    loss_alone, grads_alone = loss_and_grads(alone, generate(alone, survivors))
    assert math.isfinite(loss.item())
    torch.testing.assert_close(loss, loss_alone)
    assert grads.keys() == grads_alone.keys() and grads
    for name, grad in grads.items():
        torch.testing.assert_close(grad, grads_alone[name], msg=name)


def test_a_batch_where_every_rollout_failed_trains_on_nothing(tiny_model, tmp_path):
    batch = [*group_b(), failed(0, 0), failed(0, 1, RolloutStatus.TRUNCATED), scored(0, 2, None),
             failed(0, 3, RolloutStatus.COMPLETED, spans=False)]
    trainer = make_trainer(tiny_model, tmp_path, batch, 4)
    inputs = generate(trainer, batch)

    assert (inputs["advantages"] == 0).all()
    assert inputs["num_items_in_batch"] == 0
    loss, grads = loss_and_grads(trainer, inputs)
    assert loss.item() == 0.0
    assert all(torch.isfinite(g).all() and (g == 0).all() for g in grads.values())


def test_rows_follow_the_episode_and_mask_what_is_not_trainable():
    masked = MaskedRow(pad_id=7, eos_id=9)
    records = [scored(0, 0, 1.0, eos=9), failed(0, 1, eos=9)]
    output = rollout_output(records, masked, ["reward"])
    row = records[0].episode.row
    assert output["prompt_ids"] == [row.prompt_ids, [7]]
    assert output["completion_ids"] == [row.completion_ids, [9]]
    assert output["completion_ids"][0][-1] == 9  # ends with the model's EOS
    assert output["env_mask"][0] == [1, 1, 1, 0, 0, 0, 1, 1] and output["env_mask"][1] == [0]
    assert output["logprobs"][0] == [-1.0, -1.5, -0.5, 0.0, 0.0, 0.0, -2.0, -0.25]
    assert output["veri_rewards"] == [{"reward": 1.0}, {"reward": None}]
