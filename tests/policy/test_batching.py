"""Concurrent requests are decoded together, and the server stays responsive while it decodes.

`GET /stats` counts decode steps and the rows in each; 8 requests decoded one after another would
average 1 row per step, so the average over the window proves they shared steps. (Speed is measured in
bench/policy_hf_batching.py, not asserted here.)
"""

from __future__ import annotations

import asyncio

import httpx
from transformers import PreTrainedModel

from testkit.servers import RunningServer


def _request(prompt: list[int], max_tokens: int, seed: int) -> dict:
    return {"prompt": prompt, "max_tokens": max_tokens, "seed": seed, "ignore_eos": True, "return_token_ids": True}


def test_eight_concurrent_requests_share_decode_steps(
    policy_server: RunningServer, prompts: list[list[int]]
) -> None:
    async def run() -> tuple[dict, list[httpx.Response], dict]:
        async with httpx.AsyncClient(base_url=policy_server.url, timeout=120) as c:
            before = (await c.get("/stats")).json()
            calls = [c.post("/v1/completions", json=_request(prompts[i % len(prompts)], 48, i)) for i in range(8)]
            responses = await asyncio.gather(*calls)
            after = (await c.get("/stats")).json()
            return before, responses, after

    before, responses, after = asyncio.run(run())
    assert all(r.status_code == 200 for r in responses)
    assert all(len(r.json()["choices"][0]["token_ids"]) == 48 for r in responses)
    steps = after["decode_steps"] - before["decode_steps"]
    rows = after["decoded_rows"] - before["decoded_rows"]
    assert rows == 8 * 47  # the first token of each row comes from its prefill
    assert after["requests"] - before["requests"] == 8
    assert after["peak_batch_requests"] >= 2
    assert rows / steps >= 2, f"8 requests took {steps} decode steps for {rows} row-steps: not batched"


def test_health_answers_while_decoding(policy_server: RunningServer, reference_model: PreTrainedModel) -> None:
    max_tokens = min(400, reference_model.config.max_position_embeddings - 8)

    async def run() -> tuple[int, int, dict]:
        async with httpx.AsyncClient(base_url=policy_server.url, timeout=120) as c:
            request = _request([1, 2, 3], max_tokens, 0) | {"n": 8}
            generation = asyncio.create_task(c.post("/v1/completions", json=request))
            while (await c.get("/stats")).json()["active_rows"] == 0:
                assert not generation.done(), generation.result().text
                await asyncio.sleep(0.005)
            health = await c.get("/health", timeout=5)
            still_decoding = (await c.get("/stats")).json()["active_rows"]
            return health.status_code, still_decoding, (await generation).json()

    status, still_decoding, body = asyncio.run(run())
    assert status == 200
    assert still_decoding > 0
    assert len(body["choices"]) == 8
