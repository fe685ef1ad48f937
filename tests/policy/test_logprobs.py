"""Sampled logprobs equal one unpadded full forward of the same weights (within 1e-4), alone and batched.

The number is log_softmax(logits / temperature)[token] (raw logits at temperature 0): what TRL's GRPO
trainer computes, so importance ratios are exactly 1 on-policy.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from transformers import PreTrainedModel

from testkit.servers import RunningServer
from tests.policy.helpers import assert_logprobs_match, complete


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_single_prompt(
    client: httpx.Client, prompts: list[list[int]], reference_model: PreTrainedModel, temperature: float
) -> None:
    body = complete(
        client, prompt=prompts[2], max_tokens=24, temperature=temperature, seed=3, logprobs=0, return_token_ids=True
    )
    assert_logprobs_match(reference_model, body["choices"][0], temperature)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_batch_of_prompts_of_different_lengths(
    client: httpx.Client, prompts: list[list[int]], reference_model: PreTrainedModel, temperature: float
) -> None:
    body = complete(
        client, prompt=prompts, n=2, max_tokens=20, temperature=temperature, seed=11, logprobs=0, return_token_ids=True
    )
    assert len(body["choices"]) == 2 * len(prompts)
    for choice in body["choices"]:
        assert_logprobs_match(reference_model, choice, temperature)


def test_top_p_sampling_reports_untruncated_logprobs(
    client: httpx.Client, prompts: list[list[int]], reference_model: PreTrainedModel
) -> None:
    body = complete(
        client, prompt=prompts[1], max_tokens=16, temperature=0.7, top_p=0.5, seed=5, logprobs=0, return_token_ids=True
    )
    assert_logprobs_match(reference_model, body["choices"][0], 0.7)


def test_concurrent_requests_join_a_running_batch(
    policy_server: RunningServer, prompts: list[list[int]], reference_model: PreTrainedModel
) -> None:
    """Separate requests with different prompt lengths and temperatures, decoded together."""
    settings = [(prompts[i % len(prompts)], [1.0, 0.7, 0.0][i % 3], 10 + 3 * i) for i in range(6)]

    async def run() -> list[dict]:
        async with httpx.AsyncClient(base_url=policy_server.url, timeout=120) as c:
            calls = [
                c.post(
                    "/v1/completions",
                    json={
                        "prompt": prompt,
                        "max_tokens": max_tokens,
                        "temperature": temperature,
                        "seed": max_tokens,
                        "logprobs": 0,
                        "return_token_ids": True,
                        "ignore_eos": True,
                    },
                )
                for prompt, temperature, max_tokens in settings
            ]
            return [r.json() for r in await asyncio.gather(*calls)]

    for body, (_, temperature, max_tokens) in zip(asyncio.run(run()), settings, strict=True):
        choice = body["choices"][0]
        assert len(choice["token_ids"]) == max_tokens
        assert_logprobs_match(reference_model, choice, temperature)
