"""Tool calls the renderer cannot parse are counted, not silent (docs/console.md): the real openai and
anthropic SDKs through the proxy, a scripted policy writing each broken kind; the span names it, the
rollout and the step metrics count it, `veri debug` names it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest

from testkit.proxy_script import WEATHER_TOOL, proxy_args
from testkit.servers import RunningServer, start_server
from veri.archive.metrics import step_metrics
from veri.core.episodes import RolloutStatus, build_episode
from veri.core.records import SessionInfo, Span
from veri.core.rollout_record import RewardOutcome, RolloutRecord
from veri.services.proxy.control_client import ControlClient
from veri.tools.harness.debug import explain

pytestmark = pytest.mark.needs("process")

# The user's turn names the kind; the policy is teacher-forced to write that kind of broken call.
BROKEN = {
    "invalid_json": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"\n</tool_call>',
    # longer than the proxy's --max-tokens 48: cut off inside the call
    "truncated": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "' + "Paris " * 60 + '"}}\n</tool_call>',
    "missing_name": '<tool_call>\n{"arguments": {"city": "Paris"}}\n</tool_call>',
    "malformed": '<tool_call>\n{"name": "get_weather", "arguments": "city=Paris"}\n</tool_call>',
    "unknown_tool": '<tool_call>\n{"name": "get_time", "arguments": {"zone": "CET"}}\n</tool_call>',
}
SCRIPT = [{"if_last_user_turn_contains": f"please break {kind}", "reply": reply} for kind, reply in BROKEN.items()]
SCRIPT.append({"if_last_user_turn_contains": "weather in Paris, cleanly",
               "reply": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'})

ANTHROPIC_WEATHER = {"name": "get_weather", "description": "Current weather for a city",
                     "input_schema": WEATHER_TOOL["function"]["parameters"]}


@pytest.fixture(scope="module")
def proxy(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    folder = tmp_path_factory.mktemp("broken-calls")
    script = folder / "script.json"
    script.write_text(json.dumps(SCRIPT))
    with start_server(["serve", "policy", "--model", str(tiny_model), "--scripted-replies", str(script)]) as policy:
        with start_server(proxy_args(policy.url, tiny_model, folder / "spans")) as proxy:
            yield proxy


@pytest.fixture
def control(proxy: RunningServer) -> ControlClient:
    return ControlClient(proxy.url)


def openai_call(session: SessionInfo, text: str) -> dict:
    client = openai.OpenAI(base_url=session.openai_base_url, api_key=session.api_key, max_retries=0)
    reply = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": text}],
                                           tools=[WEATHER_TOOL])
    message = reply.choices[0].message
    return {"text": message.content or "", "calls": [call.function.name for call in message.tool_calls or []]}


def anthropic_call(session: SessionInfo, text: str) -> dict:
    client = anthropic.Anthropic(base_url=session.anthropic_base_url, api_key=session.api_key, max_retries=0)
    reply = client.messages.create(model="policy", max_tokens=256, messages=[{"role": "user", "content": text}],
                                   tools=[ANTHROPIC_WEATHER])
    return {"text": "".join(block.text for block in reply.content if block.type == "text"),
            "calls": [block.name for block in reply.content if block.type == "tool_use"]}


def record_of(spans: list[Span]) -> RolloutRecord:
    return RolloutRecord(rollout_id=spans[0].rollout_id, task_index=0, rollout_index=0,
                         status=RolloutStatus.COMPLETED, spans=spans, episode=build_episode(spans),
                         reward=RewardOutcome(reward=0.0))


@pytest.mark.parametrize("call", [openai_call, anthropic_call], ids=["openai", "anthropic"])
@pytest.mark.parametrize("kind", list(BROKEN))
def test_each_broken_kind_is_recorded_on_its_span(control: ControlClient, call, kind: str):
    session = control.open_session()
    got = call(session, f"What is the weather? please break {kind}")
    [span] = control.spans(session.rollout_id)
    [failure] = span.tool_call_failures
    assert failure.kind == kind
    if kind == "unknown_tool":  # a call all the same: the harness answers "no such tool", as with any API
        assert got["calls"] == ["get_time"] and failure.sent_as == "tool_call" and failure.name == "get_time"
    else:  # the text the policy wrote, as before
        assert got["calls"] == [] and failure.sent_as == "text"
        assert failure.raw and failure.raw in got["text"]
    if kind == "truncated":
        assert span.finish_reason == "length"


def test_a_clean_call_records_no_failure(control: ControlClient):
    session = control.open_session()
    assert openai_call(session, "What is the weather in Paris, cleanly?")["calls"] == ["get_weather"]
    [span] = control.spans(session.rollout_id)
    assert span.tool_call_failures == []


def test_the_rollout_the_step_metrics_and_veri_debug_count_them(control: ControlClient):
    broken = control.open_session()
    for kind in ("invalid_json", "truncated", "unknown_tool"):
        openai_call(broken, f"Weather? please break {kind}")
    anthropic_call(broken, "Weather? please break invalid_json")
    clean = control.open_session()
    openai_call(clean, "What is the weather in Paris, cleanly?")

    records = [record_of(control.spans(broken.rollout_id)), record_of(control.spans(clean.rollout_id))]
    assert records[0].tool_call_failures == {"invalid_json": 2, "truncated": 1, "unknown_tool": 1}
    assert records[1].tool_call_failures == {}

    metrics = step_metrics(records, {})
    assert metrics["tool_calls/attempted"] == 5  # 4 broken (one of them still a call) + 1 clean
    assert metrics["tool_calls/parse_failed"] == 4
    assert metrics["tool_calls/parse_failed/invalid_json"] == 2 and metrics["tool_calls/parse_failed/malformed"] == 0
    assert metrics["tool_calls/parse_failure_rate"] == pytest.approx(4 / 5)
    assert metrics["rollouts/with_parse_failures"] == 1

    text = explain(json.loads(records[0].model_dump_json()))  # as `veri debug` reads an archived record
    assert "tool call not parsed: invalid_json 'get_weather'" not in text  # invalid JSON: no name could be read
    assert "tool call not parsed: invalid_json:" in text
    assert "tool call not parsed: unknown_tool 'get_time'" in text and "(sent to the harness as tool_call)" in text
    assert "tool-call parse failures: 4 (2 invalid_json, 1 truncated, 1 unknown_tool)" in text
