"""Capture-proxy overhead: the same conversations sent direct to the policy API vs through the proxy.

The upstream answers instantly with fixed token ids (a tool call), so the difference is the proxy:
render/bridge, parse, span write, protocol formatting. Each session runs a tool-loop conversation
(first call full-rendered, later calls bridged) whose prompt is ~1k or ~8k tokens. Prints added
latency p50/p99 per call and calls/s at 1, 16 and 64 concurrent sessions.

    python bench/proxy_overhead.py --model build/models/tiny
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson
import psutil
from transformers import AutoTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.servers import free_port, start_server

TURNS = 4
TOOL = {"type": "function", "function": {"name": "lookup", "description": "Look a word up",
                                         "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}


def filler(tokenizer, tokens: int) -> str:
    words = "the policy samples tokens and the proxy records every one of them exactly".split()
    text, n = [], 0
    while n < tokens:
        chunk = " ".join(words)
        text.append(chunk)
        n += len(tokenizer.encode(" " + chunk, add_special_tokens=False))
    return " ".join(text)


def conversation(system: str) -> list[dict]:
    return [{"role": "system", "content": system}, {"role": "user", "content": "Look up three words."}]


async def post(client: aiohttp.ClientSession, url: str, body: dict, headers: dict | None = None) -> dict:
    async with client.post(url, data=orjson.dumps(body),
                           headers={"content-type": "application/json", **(headers or {})}) as reply:
        reply.raise_for_status()
        return orjson.loads(await reply.read())


async def one_session_proxy(client: aiohttp.ClientSession, proxy_url: str, system: str, latencies: list[float]) -> None:
    session = await post(client, f"{proxy_url}/control/sessions", {})
    headers = {"Authorization": f"Bearer {session['api_key']}"}
    messages = conversation(system)
    for turn in range(TURNS):
        started = time.perf_counter()
        reply = await post(client, f"{session['openai_base_url']}/chat/completions",
                           {"model": "bench", "messages": messages, "tools": [TOOL]}, headers)
        latencies.append(time.perf_counter() - started)
        message = reply["choices"][0]["message"]
        messages = [*messages, message,
                    {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": f"result {turn}"}]


async def one_session_direct(client: aiohttp.ClientSession, policy_url: str, prompts: list[list[int]],
                             latencies: list[float]) -> None:
    for prompt in prompts:
        started = time.perf_counter()
        await post(client, f"{policy_url}/v1/completions",
                   {"model": "bench", "prompt": prompt, "max_tokens": 48, "logprobs": 0, "return_token_ids": True})
        latencies.append(time.perf_counter() - started)


def direct_prompts(tokenizer, system: str, reply_text: str) -> list[list[int]]:
    """The same prompts the proxy builds for one session, pre-rendered, for the direct path."""
    messages, prompts = conversation(system), []
    for turn in range(TURNS):
        prompts.append(tokenizer.apply_chat_template(messages, tools=[TOOL], add_generation_prompt=True,
                                                     tokenize=True, return_dict=False))
        call = {"id": f"c{turn}", "type": "function", "function": {"name": "lookup", "arguments": {"q": "word"}}}
        messages = [*messages, {"role": "assistant", "content": "", "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": f"c{turn}", "content": f"result {turn}"}]
    return prompts


async def run(concurrency: int, session_fn) -> tuple[list[float], float]:
    latencies: list[float] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency + 4)) as client:
        started = time.perf_counter()
        await asyncio.gather(*(session_fn(client, latencies) for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return latencies, len(latencies) / elapsed


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[q - 1] * 1000 if len(values) > 1 else values[0] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path("build/models/tiny"))
    parser.add_argument("--rounds", type=int, default=3,
                        help="sessions per concurrent slot (at least 48 sessions in all)")
    args = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    reply_text = '<tool_call>\n{"name": "lookup", "arguments": {"q": "word"}}\n</tool_call>'
    reply_ids = tokenizer.encode(reply_text, add_special_tokens=False) + [tokenizer.convert_tokens_to_ids("<|im_end|>")]

    policy_port = free_port()
    policy = subprocess.Popen([sys.executable, str(Path(__file__).resolve().parents[1] / "tests" / "vllm_standin.py"),
                               "--port", str(policy_port), "--reply-ids", json.dumps(reply_ids)])
    policy_url = f"http://127.0.0.1:{policy_port}"
    try:
        with tempfile.TemporaryDirectory() as store, start_server(
            ["serve", "proxy", "--policy-url", policy_url, "--model", str(args.model), "--store", store]
        ) as proxy:
            proxy_process = psutil.Process(proxy.process.pid)
            print(f"{'tokens':>6} {'sessions':>8} {'direct p50':>10} {'proxy p50':>9} {'added p50':>9} "
                  f"{'added p99':>9} {'proxy calls/s':>13} {'direct calls/s':>14} {'proxy cpu/call':>14}")
            for size in (1000, 8000):
                system = filler(tokenizer, size)
                prompts = direct_prompts(tokenizer, system, reply_text)
                for concurrency in (1, 16, 64):
                    direct, proxied, direct_rate, proxy_rate, cpu = [], [], 0.0, 0.0, 0.0

                    def direct_call(c, lat, prompts=prompts):
                        return one_session_direct(c, policy_url, prompts, lat)

                    def proxy_call(c, lat, system=system):
                        return one_session_proxy(c, proxy.url, system, lat)

                    # Enough calls for a steady p50 where the concurrency is low (1 session: 48 x 4 calls).
                    for _ in range(max(args.rounds, -(-48 // concurrency))):
                        d, dr = asyncio.run(run(concurrency, direct_call))
                        before = sum(proxy_process.cpu_times()[:2])
                        p, pr = asyncio.run(run(concurrency, proxy_call))
                        cpu += sum(proxy_process.cpu_times()[:2]) - before
                        direct += d
                        proxied += p
                        direct_rate, proxy_rate = max(direct_rate, dr), max(proxy_rate, pr)
                    print(f"{len(prompts[-1]):>6} {concurrency:>8} "
                          f"{pct(direct, 50):>9.2f}ms {pct(proxied, 50):>8.2f}ms "
                          f"{pct(proxied, 50) - pct(direct, 50):>8.2f}ms {pct(proxied, 99) - pct(direct, 99):>8.2f}ms "
                          f"{proxy_rate:>13.0f} {direct_rate:>14.0f} {cpu / len(proxied) * 1000:>12.2f}ms")
    finally:
        policy.terminate()
        policy.wait()


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
