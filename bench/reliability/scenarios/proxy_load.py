"""Load and soak through the capture proxy (docs/reliability.md, "The scenarios").

A real `veri serve proxy` in front of a real `veri serve policy` (hf, the tiny model; its batcher
decodes the concurrent calls together). Each session is the OpenAI SDK holding a multi-turn chat: every
call sends the whole conversation so far, so every call after the first is bridged.

- load: S sessions x C calls at once; then every session's spans are fetched and counted: exactly C
  each, request indexes 0..C-1, every span of the version that served it; later calls not bridged are
  counted (see `unbridged`: past 1% is a failure).
  The proxy's peak RSS (workers included) and the calls' p50/p99 latency are reported.
- soak: rounds of the same load for N minutes, the proxy's RSS sampled every few seconds; a growth
  trend past `SOAK_GROWTH_LIMIT_MB` fails (see there why that much).

Weight syncs under load are the `weight_sync` scenario (weight_sync.py, on the same driver).
`tests/proxy/test_load.py` runs the same checks, CI-sized.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import psutil

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:  # run by bench/reliability/run.py, not from the repo root
    sys.path.insert(0, str(REPO))

from testkit.servers import start_server  # noqa: E402
from veri.core.records import SessionInfo, Span  # noqa: E402
from veri.services.proxy.control_client import ControlClient  # noqa: E402

NAME = "proxy_load"

MAX_TOKENS = 8  # per call: the load is in the number of calls and sessions, not in decode length
RSS_EVERY_S = 5.0
# The soak's RSS may grow this much from the first to the last quarter of its samples (after the first
# round, which fills the tokenizer's, renderer's and prefix caches). Everything per session lives in the
# span store (SQLite, a bounded page cache); what is left is allocator slack, which wanders by tens of MB
# between rounds on CPython. On the 2-core box a 30-minute soak is ~15k calls: this limit catches a leak
# of ~3 kB per call (a span's token lists kept in memory would be tens of kB each).
SOAK_GROWTH_LIMIT_MB = 48.0


@dataclass
class LoadResult:
    sessions: list[SessionInfo]
    latencies_s: list[float] = field(default_factory=list)
    server_errors: int = 0  # 5xx answers seen on the wire (the SDK retries them)
    failures: list[str] = field(default_factory=list)  # calls that failed even after the SDK's retries
    full_renders: list[str] = field(default_factory=list)  # why a later call was not bridged (see unbridged)


@dataclass
class RssSampler:
    """The proxy's RSS (its workers included), every `every_s` seconds in a thread."""

    pid: int
    every_s: float = RSS_EVERY_S
    samples: list[tuple[float, float]] = field(default_factory=list)  # (seconds since start, MB)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> RssSampler:
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self._sample()

    def _sample(self) -> None:
        self.samples.append((time.monotonic() - self._started, process_rss_mb(self.pid)))

    @property
    def peak_mb(self) -> float:
        return max(mb for _, mb in self.samples)


def process_rss_mb(pid: int) -> float:
    process = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [process, *process.children(recursive=True)]) / 2**20


# --- driving sessions ---------------------------------------------------------------------------------


async def _converse(client: Any, session: SessionInfo, calls: int, result: LoadResult) -> None:
    import openai

    sdk = openai.AsyncOpenAI(base_url=session.openai_base_url, api_key=session.api_key, http_client=client,
                             max_retries=5)
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"Session {session.rollout_id}: turn 0."}]
    for turn in range(calls):
        started = time.monotonic()
        try:
            reply = await sdk.chat.completions.create(model="policy", messages=messages)  # type: ignore[arg-type]
        except openai.APIError as exc:
            result.failures.append(f"{session.rollout_id} call {turn}: {type(exc).__name__}: {exc}")
            return
        result.latencies_s.append(time.monotonic() - started)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True, exclude={"refusal", "annotations", "audio"}))
        for call in message.tool_calls or []:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "ok"})
        messages.append({"role": "user", "content": f"turn {turn + 1}."})


async def drive(sessions: list[SessionInfo], calls: int, result: LoadResult) -> None:
    def count(response: httpx.Response) -> None:
        if response.status_code >= 500:
            result.server_errors += 1

    async def hook(response: httpx.Response) -> None:
        count(response)

    limits = httpx.Limits(max_connections=len(sessions) + 8, max_keepalive_connections=len(sessions) + 8)
    async with httpx.AsyncClient(timeout=600, limits=limits, event_hooks={"response": [hook]}) as client:
        await asyncio.gather(*(_converse(client, session, calls, result) for session in sessions))


def run_load(control: ControlClient, sessions: int, calls: int) -> LoadResult:
    """`sessions` sessions, each `calls` chained calls, all at once; the sessions are left open."""
    result = LoadResult(sessions=[control.open_session() for _ in range(sessions)])
    asyncio.run(drive(result.sessions, calls, result))
    return result


# --- checking the spans -------------------------------------------------------------------------------


def span_problems(spans: list[Span], calls: int, versions: set[int]) -> list[str]:
    """What is wrong with one session's spans after `calls` answered calls."""
    if not spans:
        return [f"no spans (expected {calls})"]
    rollout = spans[0].rollout_id
    problems = []
    indexes = [span.request_index for span in spans]
    if indexes != list(range(calls)):
        lost, extra = sorted(set(range(calls)) - set(indexes)), len(indexes) - len(set(indexes))
        problems.append(f"{rollout}: {len(spans)} spans for {calls} calls (missing {lost[:5]}, {extra} duplicated)")
    wrong = [(span.request_index, span.policy_version) for span in spans if span.policy_version not in versions]
    if wrong:
        problems.append(f"{rollout}: spans (index, version) {wrong[:5]} carry no version in {sorted(versions)}")
    return problems


def unbridged(spans: list[Span]) -> list[str]:
    """Why each later call of a session was rendered in full. The tiny model writes random tokens, and now
    and then a reply the client's echo cannot re-render into the same ids (a stray tag the chat template
    treats specially): the span says so (`full_render` and its reason) and stays exact, so it is counted
    and reported, not failed; a proxy that could not bridge at all shows as every call here."""
    return [span.prompt_source_reason for span in spans[1:] if span.prompt_source != "bridged"]


def counted(control: ControlClient, result: LoadResult, calls: int, versions: set[int]) -> tuple[int, list[str]]:
    """(spans lost over all sessions, problems); the sessions are closed. `result.full_renders` gets the
    reason of every later call that was not bridged."""
    lost, problems = 0, []
    for session in result.sessions:
        spans = control.spans(session.rollout_id)
        lost += max(0, calls - len({span.request_index for span in spans}))
        problems += span_problems(spans, calls, versions)
        result.full_renders += unbridged(spans)
        control.close_session(session.rollout_id)
    return lost, problems


def bridging_problem(result: LoadResult, calls: int) -> str | None:
    """More than 1% of the later calls not bridged is a proxy that stopped bridging, not the odd reply."""
    later = len(result.sessions) * (calls - 1)
    if later and len(result.full_renders) > later / 100:
        return f"{len(result.full_renders)} of {later} later calls not bridged, e.g. {result.full_renders[0]}"
    return None


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


def soak_trend_mb(samples: list[tuple[float, float]]) -> float:
    """Median RSS of the last quarter of `samples` minus that of the first quarter."""
    quarter = max(1, len(samples) // 4)
    return statistics.median(mb for _, mb in samples[-quarter:]) - statistics.median(mb for _, mb in samples[:quarter])


# --- the stack ----------------------------------------------------------------------------------------


@contextlib.contextmanager
def load_stack(model: Path, *policy_args: str, workers: int = 1) -> Iterator[tuple[str, str, int]]:
    """A real policy and proxy on the tiny model: (proxy URL, policy URL, proxy pid)."""
    with tempfile.TemporaryDirectory(prefix="veri-load-") as store, \
            start_server(["serve", "policy", "--model", str(model), *policy_args]) as policy, \
            start_server(["serve", "proxy", "--policy-url", policy.url, "--model", str(model), "--store", store,
                          "--max-tokens", str(MAX_TOKENS), "--workers", str(workers)]) as proxy:
        yield proxy.url, policy.url, proxy.process.pid


def tiny_model() -> Path:
    from veri.tools.models.tiny import build_tiny_model

    prebuilt = REPO / "build" / "models" / "tiny"
    return prebuilt if (prebuilt / "config.json").exists() else build_tiny_model(prebuilt)


def policy_version(policy_url: str) -> int:
    return httpx.get(f"{policy_url}/policy_version", timeout=30).json()["policy_version"]


def load_and_soak(url: str, pid: int, *, sessions: int, calls: int, soak_minutes: float,
                  version: int) -> dict[str, Any]:
    control = ControlClient(url, timeout_s=120)
    problems: list[str] = []
    with RssSampler(pid) as load_rss:
        started = time.monotonic()
        result = run_load(control, sessions, calls)
        seconds = time.monotonic() - started
    lost, found = counted(control, result, calls, {version})
    problems += result.failures[:5] + found + [p for p in [bridging_problem(result, calls)] if p]
    full_renders = len(result.full_renders)
    p50, p99 = (percentile(result.latencies_s, q) * 1000 for q in (0.5, 0.99))
    notes = [f"load {sessions}x{calls}: {len(result.latencies_s)} calls in {seconds:.0f}s, p50 {p50:.0f} ms, p99"
             f" {p99:.0f} ms, proxy peak RSS {load_rss.peak_mb:.0f} MB"]
    runs, server_errors = sessions, result.server_errors
    if soak_minutes > 0:
        with RssSampler(pid) as soak_rss:
            deadline, rounds = time.monotonic() + soak_minutes * 60, 0
            while time.monotonic() < deadline:
                round_result = run_load(control, sessions, calls)
                round_lost, found = counted(control, round_result, calls, {version})
                found += [p for p in [bridging_problem(round_result, calls)] if p]
                full_renders += len(round_result.full_renders)
                lost, server_errors, runs, rounds = lost + round_lost, server_errors + round_result.server_errors, \
                    runs + sessions, rounds + 1
                problems += round_result.failures[:5] + found
        rss = [mb for _, mb in soak_rss.samples]
        trend = soak_trend_mb(soak_rss.samples)
        notes.append(f"soak {soak_minutes:g} min ({rounds} rounds): RSS first {rss[0]:.0f} / last {rss[-1]:.0f} /"
                     f" max {max(rss):.0f} MB, trend {trend:+.0f} MB")
        if trend > SOAK_GROWTH_LIMIT_MB:
            problems.append(f"proxy RSS grew {trend:.0f} MB over the soak (limit {SOAK_GROWTH_LIMIT_MB:.0f} MB)")
    later = runs * (calls - 1)
    notes.append(f"{later - full_renders} of {later} later calls bridged ({full_renders} rendered in full, reason"
                 " in the span)")
    return {"runs": runs, "spans_lost": lost, "5xx": server_errors, "problems": problems, "notes": notes}


def run(quick: bool, soak_minutes: float | None = None) -> dict:
    sessions, calls = (64, 5) if quick else (256, 20)
    soak = soak_minutes if soak_minutes is not None else (0.5 if quick else 30.0)
    model = tiny_model()
    with load_stack(model) as (url, policy_url, pid):
        load = load_and_soak(url, pid, sessions=sessions, calls=calls, soak_minutes=soak,
                             version=policy_version(policy_url))
    problems = load["problems"]
    return {"scenario": NAME, "runs": load["runs"], "outcome": "fail" if problems else "pass",
            "spans_lost": load["spans_lost"], "5xx": load["5xx"], "escapes": 0,
            "notes": "; ".join(load["notes"] + problems[:5])}


if __name__ == "__main__":
    minutes = float(sys.argv[sys.argv.index("--soak-minutes") + 1]) if "--soak-minutes" in sys.argv else None
    print(orjson.dumps(run(quick="--quick" in sys.argv, soak_minutes=minutes), option=orjson.OPT_INDENT_2).decode())
