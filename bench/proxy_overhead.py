"""Gateway overhead, side by side: veri's capture proxy vs Agent Lightning 1.0.2's gateway.

Both sit in front of the same instant upstream (`bench/instant_upstream.py`, vLLM's reply shapes,
prompt ids echoed) under the same load: tool-loop conversations of 4 calls whose system prompt is
~1k or ~8k tokens, every session a new task (its own user message), so veri's first call of each
session renders a new conversation behind the shared system prompt and tools. A call's
*added* latency is the gateway's latency minus the same request sent straight to the upstream
(veri sends token ids to `/v1/completions`; Agent Lightning forwards chat to `/v1/chat/completions`);
the direct p99 is the box's noise floor. Warm-up sessions are not counted: two for Agent Lightning,
for veri until each worker has opened two (a worker caches a system prompt the second time it sees
it); veri's cold first calls are printed.

Agent Lightning's gateway runs as its README starts it (`python -m agentlightning.server`, one
process, its logs to /dev/null); veri's proxy as the stack runs it (`veri serve proxy`, gunicorn with
`--proxy-workers` uvicorn workers, 2 as VERI_PROXY_WORKERS' default). calls/s is the median over
rounds, and the ratio the median of each round's (both gateways back to back, under the same load); at
1 session the tail lines say where the p99 comes from: sessions' first calls, the box (slow direct
calls), and for the slowest 1 % of veri's calls their `Server-Timing` (services/proxy/timing.py: the worker's
own time, its CPU, each phase, its collections) beside the bench's own collections and what neither
accounts for. Agent Lightning needs Python >= 3.12 and is never a veri dependency: a throwaway venv.

    /root/.pyenv/versions/3.12.1/bin/python -m venv build/bench-al-venv
    build/bench-al-venv/bin/pip install agentlightning==1.0.2
    python bench/proxy_overhead.py --model build/models/tiny [--al-python build/bench-al-venv/bin/python]

Without the Agent Lightning venv, veri's rows are printed alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import httpx
import orjson
import psutil
from transformers import AutoTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from testkit.servers import free_port, start_server
from veri.services.proxy.timing import GC_PAUSES as CLIENT_GC  # this process's collections (gc.callbacks)

ROOT = Path(__file__).resolve().parents[1]

TURNS = 4
MODEL = "bench"
TOOL = {"type": "function", "function": {"name": "lookup", "description": "Look a word up",
                                         "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}
REPLY_TEXT = '<tool_call>\n{"name": "lookup", "arguments": {"q": "word"}}\n</tool_call>'

Post = Callable[[aiohttp.ClientSession, str, list[dict]], Awaitable[dict]]


def filler(tokenizer, tokens: int) -> str:
    words = "the policy samples tokens and the proxy records every one of them exactly".split()
    text, n = [], 0
    while n < tokens:
        chunk = " ".join(words)
        text.append(chunk)
        n += len(tokenizer.encode(" " + chunk, add_special_tokens=False))
    return " ".join(text)


def first_messages(system: str, task: str) -> list[dict]:
    return [{"role": "system", "content": system}, {"role": "user", "content": f"Look up three words. Task {task}."}]


def next_messages(messages: list[dict], reply: dict, turn: int) -> list[dict]:
    call_id = reply["tool_calls"][0]["id"]
    return [*messages, reply, {"role": "tool", "tool_call_id": call_id, "content": f"result {turn}"}]


def rendered_prompts(tokenizer, system: str) -> list[list[int]]:
    """One session's prompts as the model renders them (the direct path's requests, the upstream's echo)."""
    messages, prompts = first_messages(system, "0"), []
    for turn in range(TURNS):
        prompts.append(tokenizer.apply_chat_template(messages, tools=[TOOL], add_generation_prompt=True,
                                                     tokenize=True, return_dict=False))
        call = {"id": f"c{turn}", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "word"}'}}
        messages = next_messages(messages, {"role": "assistant", "content": "", "tool_calls": [call]}, turn)
    return prompts


async def post(client: aiohttp.ClientSession, url: str, body: dict | list, headers: dict | None = None) -> dict:
    return (await post_timed(client, url, body, headers))[0]


async def post_timed(client: aiohttp.ClientSession, url: str, body: dict | list,
                     headers: dict | None = None) -> tuple[dict, dict[str, float], str]:
    """The reply, where the gateway says its time went (veri's `Server-Timing`: ms by phase) and which of
    its workers answered (veri's x-veri-proxy-pid)."""
    async with client.post(url, data=orjson.dumps(body),
                           headers={"content-type": "application/json", **(headers or {})}) as reply:
        reply.raise_for_status()
        return (orjson.loads(await reply.read()), server_timing(reply.headers.get("server-timing", "")),
                reply.headers.get("x-veri-proxy-pid", ""))


def server_timing(header: str) -> dict[str, float]:
    """`total;dur=3.1, cpu;dur=2.4, ...` -> {"total": 3.1, "cpu": 2.4, ...}"""
    phases = {}
    for item in filter(None, (part.strip() for part in header.split(","))):
        name, _, duration = item.partition(";dur=")
        phases[name] = float(duration)
    return phases


# --- one session per path ------------------------------------------------------------------------


@dataclass
class Call:
    latency_ms: float
    phases: dict[str, float]  # the gateway's Server-Timing (veri): total, cpu, request, render, policy, span, gc
    turn: int
    client_gc_ms: float  # the bench's own collections during the call (they delay its reading of the reply)
    worker: str  # veri: the worker process that answered


@dataclass
class Gateway:
    """How one gateway opens a session and where its chat calls go."""

    name: str
    open_session: Callable[[aiohttp.ClientSession], Awaitable[tuple[str, dict]]]  # -> chat URL, headers
    process: psutil.Process
    latencies: list[float] = field(default_factory=list)
    first_calls: list[float] = field(default_factory=list)  # a session's first call (no bridge to extend)
    calls: list[Call] = field(default_factory=list)  # each call's latency with the gateway's own account of it
    rates: list[float] = field(default_factory=list)
    cpu_s: float = 0.0

    def cpu_times(self) -> float:
        """User + system CPU of the gateway and its children (gunicorn's master serves veri's worker)."""
        processes = [self.process, *self.process.children(recursive=True)]
        return sum(sum(process.cpu_times()[:2]) for process in processes)


async def chat_session(client: aiohttp.ClientSession, gateway: Gateway, system: str, latencies: list[float]) -> None:
    url, headers = await gateway.open_session(client)
    messages = first_messages(system, uuid.uuid4().hex[:8])
    for turn in range(TURNS):
        client_gc = CLIENT_GC.total_s
        started = time.perf_counter()
        reply, phases, worker = await post_timed(client, url, {"model": MODEL, "messages": messages, "tools": [TOOL]},
                                                 headers)
        latencies.append(time.perf_counter() - started)
        gateway.calls.append(Call(latencies[-1] * 1000, phases, turn, (CLIENT_GC.total_s - client_gc) * 1000, worker))
        if turn == 0:
            gateway.first_calls.append(latencies[-1])
        messages = next_messages(messages, reply["choices"][0]["message"], turn)


async def direct_completions(client, upstream: str, prompts: list[list[int]], latencies: list[float]) -> None:
    for prompt in prompts:
        started = time.perf_counter()
        await post(client, f"{upstream}/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": 48,
                                                           "logprobs": 0, "return_token_ids": True})
        latencies.append(time.perf_counter() - started)


async def direct_chat(client, upstream: str, system: str, latencies: list[float]) -> None:
    messages = first_messages(system, uuid.uuid4().hex[:8])
    for turn in range(TURNS):
        started = time.perf_counter()
        reply = await post(client, f"{upstream}/v1/chat/completions",
                           {"model": MODEL, "messages": messages, "tools": [TOOL], "logprobs": True,
                            "return_token_ids": True})
        latencies.append(time.perf_counter() - started)
        messages = next_messages(messages, reply["choices"][0]["message"], turn)


async def run(concurrency: int, session: Callable[[aiohttp.ClientSession, list[float]], Awaitable[None]]
              ) -> tuple[list[float], float]:
    latencies: list[float] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency + 4)) as client:
        started = time.perf_counter()
        await asyncio.gather(*(session(client, latencies) for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return latencies, len(latencies) / elapsed


# --- the servers ---------------------------------------------------------------------------------


@contextlib.contextmanager
def instant_upstream(reply_ids: list[int]) -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen([sys.executable, str(ROOT / "bench" / "instant_upstream.py"), "--port", str(port),
                                "--reply-ids", orjson.dumps(reply_ids).decode()])
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(process, f"{url}/health")
        yield url
    finally:
        process.terminate()
        process.wait()


@contextlib.contextmanager
def veri_proxy(model: Path, upstream: str, workers: int) -> Iterator[Gateway]:
    with tempfile.TemporaryDirectory() as store, start_server(
        ["serve", "proxy", "--policy-url", upstream, "--model", str(model), "--store", store, "--workers", str(workers)]
    ) as proxy:

        async def open_session(client: aiohttp.ClientSession) -> tuple[str, dict]:
            session = await post(client, f"{proxy.url}/control/sessions", {})
            return f"{session['openai_base_url']}/chat/completions", {"Authorization": f"Bearer {session['api_key']}"}

        yield Gateway("veri", open_session, psutil.Process(proxy.process.pid))


@contextlib.contextmanager
def agent_lightning(python: Path, upstream: str) -> Iterator[Gateway]:
    """Agent Lightning's gateway as its README starts it (`python -m agentlightning.server`, Hydra config)."""
    port = free_port()
    with tempfile.TemporaryDirectory() as workdir:
        process = subprocess.Popen(
            [str(python), "-m", "agentlightning.server", f"port={port}", "host=127.0.0.1",
             f"default_proxy.model_name={MODEL}", f"hydra.run.dir={workdir}"],
            cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(process, f"{url}/healthz")
            httpx.post(f"{url}/api/models", json=[{"model": MODEL, "endpoint": f"{upstream}/v1"}]).raise_for_status()

            async def open_session(client: aiohttp.ClientSession) -> tuple[str, dict]:
                rollout_id = uuid.uuid4().hex
                await post(client, f"{url}/api/rollouts", [{"input": {}, "rollout_id": rollout_id}])
                return f"{url}/proxy/rollout/{rollout_id}/attempt/a0/mode/train/openai/v1/chat/completions", {}

            yield Gateway("agent-lightning", open_session, psutil.Process(process.pid))
        finally:
            process.terminate()
            process.wait()


def wait_healthy(process: subprocess.Popen, url: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not come up (exit code {process.poll()})")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)


# --- measuring -----------------------------------------------------------------------------------


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1] * 1000 if len(values) > 1 else values[0] * 1000


@dataclass
class Row:
    tokens: int
    concurrency: int
    gateway: Gateway
    direct: list[float]

    def added(self, q: int) -> float:
        return pct(self.gateway.latencies, q) - pct(self.direct, q)

    def line(self) -> str:
        g = self.gateway
        p50, p99 = pct(g.latencies, 50), pct(g.latencies, 99)
        return (f"{self.tokens:>6} {self.concurrency:>4} {g.name:>16} {pct(self.direct, 50):>9.2f}ms "
                f"{pct(self.direct, 99):>9.2f}ms "
                f"{self.added(50):>8.2f}ms {self.added(99):>8.2f}ms {p50:>8.2f}ms {p99:>8.2f}ms {p99 / p50:>6.1f} "
                f"{statistics.median(g.rates):>8.0f} {g.cpu_s / len(g.latencies) * 1000:>8.2f}ms")

    def tail(self) -> list[str]:
        """Where a call's p99 comes from: sessions' first calls (a render, no bridge), the gateway's own time
        and its phases (veri's Server-Timing), the bench's collections, or outside both (the same tail on
        the direct path is the box)."""
        g = self.gateway
        p50 = pct(g.latencies, 50)
        slow = sum(latency * 1000 > 3 * p50 for latency in g.latencies)
        slow_first = sum(latency * 1000 > 3 * p50 for latency in g.first_calls)
        direct_slow = sum(latency > 3 * statistics.median(self.direct) for latency in self.direct)
        lines = [f"{'':>28}tail: {slow} of {len(g.latencies)} calls over 3x p50 ({slow_first} of them first calls,"
                 f" p50 {pct(g.first_calls, 50):.2f}ms); direct {direct_slow} of {len(self.direct)}"]
        if not any(call.phases for call in g.calls):
            return lines
        ranked = sorted(g.calls, key=lambda call: call.latency_ms)
        slowest = ranked[-max(2, len(ranked) // 100):]
        paused = [call.phases.get("gc", 0.0) for call in g.calls]
        lines.append(f"{'':>28}collections in the gateway: {sum(p > 0 for p in paused)} of {len(paused)} calls,"
                     f" {sum(paused) / len(paused):.3f}ms a call on average, the longest {max(paused):.2f}ms")
        lines.append(f"{'':>28}{'':>12}" + "".join(f"{name:>9}" for name in PHASE_COLUMNS))
        lines.append(f"{'':>28}{'median':>12}" + phase_cells(ranked[len(ranked) // 2]))
        lines += [f"{'':>28}{'slow, turn ' + str(call.turn):>12}" + phase_cells(call) for call in reversed(slowest)]
        return lines


# A call's columns: its latency at the client, the gateway's own time and CPU, its phases, the gateway's and
# the bench's collections, and what neither accounts for (the box: a process waiting for a core, the sockets).
PHASE_COLUMNS = ("latency", "total", "cpu", "request", "render", "policy", "parse", "span", "gc", "bench gc",
                 "outside")


def phase_cells(call: Call) -> str:
    values = {"latency": call.latency_ms, **call.phases, "bench gc": call.client_gc_ms,
              "outside": call.latency_ms - call.phases.get("total", 0.0)}
    return "".join(f"{values.get(name, 0.0):>9.2f}" for name in PHASE_COLUMNS)


def warm_up(gateways: list[Gateway], system: str, workers: int) -> list[float]:
    """Sessions on a new system prompt until each of veri's workers has opened two (a worker caches a prefix
    the second time it sees it), two for Agent Lightning: the measured rows are the steady state. Returns
    veri's first-call latencies here, the cold ones."""
    cold: list[float] = []
    for gateway in gateways:
        gateway.calls = []
        for _ in range(8 * workers if gateway.name == "veri" else 2):
            latencies, _ = asyncio.run(run(1, lambda c, lat, g=gateway: chat_session(c, g, system, lat)))
            if gateway.name != "veri":
                continue
            cold.append(latencies[0])
            opened = Counter(call.worker for call in gateway.calls if call.turn == 0)
            if len(opened) == workers and min(opened.values()) >= 2:
                break
    return cold


def measure(gateways: list[Gateway], upstream: str, prompts: list[list[int]], system: str, concurrency: int,
            rounds: int) -> list[Row]:
    """Rounds interleave the paths, so a burst of load from elsewhere on the box hits them alike."""
    direct_tokens: list[float] = []
    direct_chat_calls: list[float] = []
    for gateway in gateways:
        gateway.latencies, gateway.first_calls, gateway.calls, gateway.rates, gateway.cpu_s = [], [], [], [], 0.0
    for _ in range(max(rounds, -(-48 // concurrency))):  # 1 session: at least 48 x 4 calls
        direct_tokens += asyncio.run(run(concurrency, lambda c, lat: direct_completions(c, upstream, prompts, lat)))[0]
        direct_chat_calls += asyncio.run(run(concurrency, lambda c, lat: direct_chat(c, upstream, system, lat)))[0]
        for gateway in gateways:
            before = gateway.cpu_times()
            latencies, rate = asyncio.run(run(concurrency, lambda c, lat, g=gateway: chat_session(c, g, system, lat)))
            gateway.cpu_s += gateway.cpu_times() - before
            gateway.latencies += latencies
            gateway.rates.append(rate)
    return [Row(len(prompts[-1]), concurrency, gateway,
                direct_tokens if gateway.name == "veri" else direct_chat_calls) for gateway in gateways]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=ROOT / "build/models/tiny")
    parser.add_argument("--al-python", type=Path, default=ROOT / "build/bench-al-venv/bin/python",
                        help="python of a venv with agentlightning==1.0.2 (skipped when absent)")
    parser.add_argument("--sizes", default="1000,8000", help="system prompt tokens, comma-separated")
    parser.add_argument("--concurrency", default="1,64", help="concurrent sessions, comma-separated")
    parser.add_argument("--proxy-workers", type=int, default=2,
                        help="veri's gunicorn workers (2: the stack's, VERI_PROXY_WORKERS)")
    parser.add_argument("--rounds", type=int, default=5, help="sessions per concurrent slot (>= 48 sessions)")
    args = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    reply_ids = tokenizer.encode(REPLY_TEXT, add_special_tokens=False) + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    with contextlib.ExitStack() as stack:
        upstream = stack.enter_context(instant_upstream(reply_ids))
        gateways = [stack.enter_context(veri_proxy(args.model, upstream, args.proxy_workers))]
        if args.al_python.exists():
            gateways.append(stack.enter_context(agent_lightning(args.al_python.absolute(), upstream)))
        else:
            print(f"no Agent Lightning venv at {args.al_python}: veri alone (see this file's docstring)")
        print(f"{'tokens':>6} {'conc':>4} {'gateway':>16} {'direct p50':>11} {'direct p99':>11} "
              f"{'added p50':>10} {'added p99':>10} "
              f"{'p50':>10} {'p99':>10} {'p99/p50':>7} {'calls/s':>8} {'cpu/call':>10}")
        summary = []
        for size in (int(s) for s in args.sizes.split(",")):
            system = filler(tokenizer, size)
            prompts = rendered_prompts(tokenizer, system)
            table = {str(len(first_messages(system, "0")) + 2 * turn): prompt for turn, prompt in enumerate(prompts)}
            httpx.put(f"{upstream}/upstream/chat-prompts", content=orjson.dumps(table)).raise_for_status()
            cold = warm_up(gateways, system, args.proxy_workers)
            print(f"{len(prompts[-1]):>6}    1  veri's warm-up first calls (a worker renders a system prompt in full"
                  " until it has seen it twice): "
                  + ", ".join(f"{latency * 1000:.1f}ms" for latency in cold))
            for concurrency in (int(c) for c in args.concurrency.split(",")):
                rows = measure(gateways, upstream, prompts, system, concurrency, args.rounds)
                for row in rows:
                    print(row.line(), flush=True)
                    if concurrency == 1:
                        print("\n".join(row.tail()), flush=True)
                if len(rows) == 2:
                    veri, al = rows
                    # Each round's gateways ran back to back: a ratio per round sees the same load on both.
                    ratios = sorted(v / a for v, a in zip(veri.gateway.rates, al.gateway.rates, strict=True))
                    summary.append(f"{veri.tokens:>6} {concurrency:>4}  veri/AL added p50 "
                                   f"{veri.added(50) / al.added(50):.2f}x, calls/s {statistics.median(ratios):.2f}x"
                                   f" (rounds {ratios[0]:.2f}-{ratios[-1]:.2f}x), CPU per call "
                                   f"{veri.gateway.cpu_s / len(veri.gateway.latencies) * 1000:.2f} / "
                                   f"{al.gateway.cpu_s / len(al.gateway.latencies) * 1000:.2f}ms")
        if summary:
            print("\n".join(["", "ratios (one run, same box, same upstream):", *summary]))


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
