"""hf policy backend batching: 8 rollout-sized requests sent concurrently vs one after another.

Starts `veri serve policy --model DIR`, warms it up, then times 8 requests (each `--max-tokens`
tokens, eos ignored) sequentially and concurrently. Prints both wall times, the speed-up, the rows per
decode step the server reports in `/stats`, and tokens/s. Concurrent requests must be decoded together:
expect a speed-up well above 1 (the target is >= 3x on the tiny model with 2 cores).

    python bench/policy_hf_batching.py --model build/models/tiny
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from testkit.servers import start_server

REQUESTS = 8


def body(i: int, max_tokens: int) -> dict:
    prompt = [(7 * i + j) % 50 + 10 for j in range(64 + 16 * i)]
    return {"prompt": prompt, "max_tokens": max_tokens, "seed": i, "ignore_eos": True, "logprobs": 0}


async def sequential(client: httpx.AsyncClient, max_tokens: int) -> float:
    started = time.perf_counter()
    for i in range(REQUESTS):
        (await client.post("/v1/completions", json=body(i, max_tokens))).raise_for_status()
    return time.perf_counter() - started


async def concurrent(client: httpx.AsyncClient, max_tokens: int) -> float:
    started = time.perf_counter()
    calls = [client.post("/v1/completions", json=body(i, max_tokens)) for i in range(REQUESTS)]
    responses = await asyncio.gather(*calls)
    for response in responses:
        response.raise_for_status()
    return time.perf_counter() - started


async def run(url: str, max_tokens: int) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        await concurrent(client, 8)  # warm-up
        seq = await sequential(client, max_tokens)
        before = (await client.get("/stats")).json()
        conc = await concurrent(client, max_tokens)
        after = (await client.get("/stats")).json()
    steps = after["decode_steps"] - before["decode_steps"]
    rows = after["decoded_rows"] - before["decoded_rows"]
    tokens = REQUESTS * max_tokens
    print(f"{REQUESTS} requests x {max_tokens} tokens")
    print(f"  sequential: {seq:7.2f} s  {tokens / seq:8.1f} tok/s")
    print(f"  concurrent: {conc:7.2f} s  {tokens / conc:8.1f} tok/s  ({rows / max(steps, 1):.1f} rows per decode step)")
    print(f"  speed-up:   {seq / conc:7.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args()
    with start_server(["serve", "policy", "--model", str(args.model)]) as server:
        asyncio.run(run(server.url, args.max_tokens))


if __name__ == "__main__":
    main()
