"""Throughput through the capture proxy vs straight to a real policy server (vLLM on a GPU, or its CPU twin).

Each session makes TURNS chat calls (a growing conversation: the first full-rendered, later ones
bridged); the direct run sends the same prompt ids to the policy's `/v1/completions` itself, with the
same sampling. Prints completion tokens/s both ways and their ratio (target >= 0.95: the proxy must not
slow a real policy down). Run where the proxy and the policy are both reachable: inside the stack's
control network, e.g. `bench/gpu_check.sh` runs it in the trainer container.

    python bench/vllm_throughput.py --proxy-url http://proxy:8000 [--sessions 32] [--max-tokens 64]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

import httpx

TURNS = 3


async def proxy_session(client: httpx.AsyncClient, proxy: str, token: str,
                        args: argparse.Namespace) -> tuple[int, list[dict]]:
    """Completion tokens, and the session's spans (for the direct replay)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    session = (await client.post(f"{proxy}/control/sessions", json={}, headers=headers)).raise_for_status().json()
    key = {"Authorization": f"Bearer {session['api_key']}"}
    messages = [{"role": "user", "content": "Tell me about the weather, then about the sea."}]
    tokens = 0
    try:
        for _ in range(TURNS):
            reply = await client.post(f"{session['openai_base_url']}/chat/completions", headers=key,
                                      json={"model": "policy", "messages": messages, "max_tokens": args.max_tokens})
            body = reply.raise_for_status().json()
            tokens += body["usage"]["completion_tokens"]
            messages = [*messages, body["choices"][0]["message"], {"role": "user", "content": "Go on."}]
    finally:
        await client.post(f"{proxy}/control/sessions/{session['rollout_id']}/close", headers=headers)
        spans = (await client.get(f"{proxy}/control/sessions/{session['rollout_id']}/spans",
                                  headers=headers)).raise_for_status().json()
    return tokens, spans


async def direct_session(client: httpx.AsyncClient, replicas: dict[int, str], spans: list[dict]) -> int:
    """One session's calls replayed straight to the replica that served them, with the sampling the proxy
    used, one after another as the harness made them."""
    tokens = 0
    for span in spans:
        sampling = span["sampling"]
        body = {"prompt": span["prompt_token_ids"], "max_tokens": sampling["max_tokens"],
                "temperature": sampling["temperature"], "top_p": sampling["top_p"], "logprobs": 0,
                "return_token_ids": True, "skip_special_tokens": False}
        reply = (await client.post(f"{replicas[span['replica']]}/v1/completions", json=body)).raise_for_status()
        tokens += reply.json()["usage"]["completion_tokens"]
    return tokens


async def run(args: argparse.Namespace) -> None:
    token = os.environ.get("VERI_CONTROL_TOKEN", "")
    limits = httpx.Limits(max_connections=4 * args.sessions)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        started = time.perf_counter()
        sessions = await asyncio.gather(*(proxy_session(client, args.proxy_url, token, args)
                                          for _ in range(args.sessions)))
        proxy_s = time.perf_counter() - started
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        stats = (await client.get(f"{args.proxy_url}/control/replicas", headers=headers)).raise_for_status().json()
        replicas = {item["replica"]: item["url"] for item in stats}
        started = time.perf_counter()
        direct = await asyncio.gather(*(direct_session(client, replicas, spans) for _, spans in sessions))
        direct_s = time.perf_counter() - started
    counts = [tokens for tokens, _ in sessions]
    through, straight = sum(counts) / proxy_s, sum(direct) / direct_s
    print(f"sessions {args.sessions} x {TURNS} turns, max_tokens {args.max_tokens}")
    print(f"direct:  {sum(direct)} completion tokens in {direct_s:.2f} s = {straight:.1f} tok/s")
    print(f"proxy:   {sum(counts)} completion tokens in {proxy_s:.2f} s = {through:.1f} tok/s")
    print(f"proxy / direct throughput: {through / straight:.3f} (target >= 0.95)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proxy-url", required=True)
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=64)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
