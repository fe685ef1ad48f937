"""Load through the proxy (docs/reliability.md), CI-sized: bench/reliability/scenarios/proxy_load.py's
checks with 32 sessions x 5 chained calls (the scenario: 256 x 20 and a 30-minute soak) against a real
proxy and hf policy on the tiny model. Every session's spans are fetched and counted."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.reliability.scenarios import proxy_load as load
from veri.core.records import PromptSource, Protocol, Span, TokenFidelity

SESSIONS, CALLS = 32, 5


@pytest.mark.needs("process")
def test_concurrent_sessions_lose_and_duplicate_no_span(tiny_model: Path) -> None:
    with load.load_stack(tiny_model) as (url, policy_url, pid):
        found = load.load_and_soak(url, pid, sessions=SESSIONS, calls=CALLS, soak_minutes=0,
                                   version=load.policy_version(policy_url))
    assert found["problems"] == []
    assert (found["runs"], found["spans_lost"], found["5xx"]) == (SESSIONS, 0, 0)
    print(found["notes"])


def _span(index: int, version: int = 0, source: PromptSource = PromptSource.BRIDGED) -> Span:
    return Span(rollout_id="r", request_index=index, path="/v1/chat/completions", protocol=Protocol.OPENAI_CHAT,
                request={}, response={}, prompt_token_ids=[1], completion_token_ids=[2], completion_logprobs=[-1.0],
                finish_reason="stop", policy_version=version, prompt_source=source, prompt_source_reason="x",
                token_fidelity=TokenFidelity.CAPTURED, sampling={}, started_at=0.0, duration_s=0.0)


def test_the_span_count_catches_lost_duplicated_and_misversioned_spans_and_unbridged_calls() -> None:
    good = [_span(i) for i in range(3)]
    assert load.span_problems(good, 3, {0}) == []
    assert "missing [2]" in load.span_problems(good[:2], 3, {0})[0]
    assert "1 duplicated" in load.span_problems([*good, _span(2)], 3, {0})[0]
    rendered = [good[0], _span(1, source=PromptSource.FULL_RENDER), good[2]]
    assert load.unbridged(rendered) == ["x"] and load.unbridged(good) == []
    result = load.LoadResult(sessions=[None] * 2, full_renders=["x"])  # type: ignore[list-item]
    assert "1 of 4 later calls not bridged" in str(load.bridging_problem(result, 3))
    assert "carry no version" in load.span_problems([*good[:2], _span(2, version=1)], 3, {0})[0]
    assert load.span_problems([], 3, {0}) == ["no spans (expected 3)"]


def test_the_soak_trend_is_the_growth_between_the_first_and_last_quarter() -> None:
    flat = [(float(t), 300.0 + (t % 3)) for t in range(40)]
    growing = [(float(t), 300.0 + 2 * t) for t in range(40)]
    assert abs(load.soak_trend_mb(flat)) <= 2
    assert load.soak_trend_mb(growing) == 60.0
