"""The off-policy correction on the hf backend: TRL's per-token importance ratio, exp(trainer logprob -
sampler logprob) truncated at `importance_sampling_cap`, computed by the trainer veri builds."""

from __future__ import annotations

import math

import pytest
import torch

from veri.loop.rewards import RewardFunction
from veri.services.trainer.grpo.config import CORRECTION
from veri.services.trainer.grpo.rewards import trl_reward_funcs
from veri.services.trainer.grpo.setup import seat_weight_sync
from veri.services.trainer.grpo.trainer import TRUNCATED_METRIC, veri_trainer_class
from veri.services.trainer.schedule.tasks import task_key, trl_dataset
from veri.services.trainer.weights.sync import PushedAfterEachStep

PROMPT, COMPLETION = [5, 6, 7, 8], [9, 10, 11, 12, 13]
CAP = 3.0


def build(model, out, rows):
    from transformers import AutoTokenizer
    from trl import GRPOConfig

    tokenizer = AutoTokenizer.from_pretrained(model)
    funcs, weights = trl_reward_funcs([RewardFunction.wrap("reward", lambda **kw: None)])

    def rollout_func(prompts, trainer):
        return {"prompt_ids": [PROMPT] * len(rows), "completion_ids": [COMPLETION] * len(rows),
                "logprobs": rows, "env_mask": [[1] * len(COMPLETION)] * len(rows),
                "veri_rewards": [{"reward": float(i)} for i in range(len(rows))]}

    args = GRPOConfig(output_dir=str(out), use_cpu=True, bf16=False, num_generations=len(rows),
                      per_device_train_batch_size=len(rows), max_completion_length=16, report_to="none",
                      reward_weights=weights, vllm_importance_sampling_clip_max=CAP, **CORRECTION)
    trainer = veri_trainer_class()(model=str(model), reward_funcs=funcs, args=args, train_dataset=trl_dataset([{}]),
                                   processing_class=tokenizer, rollout_func=rollout_func)
    seat_weight_sync(trainer, PushedAfterEachStep())  # what the job does for hf
    trainer.model.train()
    return trainer


def model_logprobs(model_dir) -> list[float]:
    """The tiny model's own logprobs of COMPLETION after PROMPT: what a sampler with the same weights captured."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    with torch.no_grad():
        logits = model(torch.tensor([PROMPT + COMPLETION])).logits[0, len(PROMPT) - 1 : -1]
    return torch.log_softmax(logits.float(), dim=-1).gather(1, torch.tensor(COMPLETION)[:, None])[:, 0].tolist()


def test_the_ratio_is_one_for_equal_weights_and_exp_of_the_gap_truncated_otherwise(tiny_model, tmp_path):
    own = model_logprobs(tiny_model)
    shifted = [lp + gap for lp, gap in zip(own, [0.0, 0.5, -0.5, -2.0, 0.0], strict=True)]  # sampler's, elsewhere
    trainer = build(tiny_model, tmp_path, [own, shifted])
    batch = trainer._generate_and_score_completions([{"prompt": task_key(0)}] * 2)
    ratio = batch["importance_sampling_ratio"]

    torch.testing.assert_close(ratio[0], torch.ones(len(COMPLETION)), atol=1e-4, rtol=0)
    # ratio = exp(trainer - sampler): 1, e^-0.5, e^0.5, e^2 = 7.39 -> truncated at the cap, 1
    expected = torch.tensor([1.0, math.exp(-0.5), math.exp(0.5), CAP, 1.0])
    torch.testing.assert_close(ratio[1], expected, atol=1e-4, rtol=0)
    assert trainer._metrics["train"][TRUNCATED_METRIC] == [pytest.approx(1 / 10)]  # one token of the ten
    assert trainer._metrics["train"]["sampling/importance_sampling_ratio/max"][-1] == CAP
