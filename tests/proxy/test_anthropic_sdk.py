"""The official `anthropic` SDK against the capture proxy: plain, stream, tool_use loop, count_tokens."""

from __future__ import annotations

import anthropic
import pytest

from testkit.proxy_script import fake_weather
from tests.proxy.conftest import assert_bridged_chain
from veri.core.episodes import build_episode, unfinished_rows

pytestmark = pytest.mark.needs("process")

WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def client_for(session) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=session.anthropic_base_url, api_key=session.api_key, max_retries=0)


def test_plain_message_with_system_blocks_and_unknown_fields(session, control):
    client = client_for(session)
    message = client.messages.create(
        model="policy", max_tokens=4096,
        system=[{"type": "text", "text": "You are terse."}, {"type": "text", "text": "Answer in English."}],
        messages=[{"role": "user",
                   "content": [{"type": "text", "text": "hello", "cache_control": {"type": "ephemeral"}}]}],
        metadata={"user_id": "u-1"},
        extra_body={"thinking": {"type": "enabled", "budget_tokens": 1024}, "context_management": {"edits": []},
                    "output_config": {"effort": "low"}},
    )
    assert message.stop_reason in {"end_turn", "max_tokens"}
    assert message.usage.output_tokens > 0
    [span] = control.spans(session.rollout_id)
    assert span.protocol == "anthropic.messages"
    assert span.messages[0] == {"role": "system", "content": "You are terse.\nAnswer in English."}
    for field in ("thinking", "context_management", "output_config", "metadata"):
        assert field in span.request
    assert span.sampling["max_tokens"] == 48
    assert len(span.completion_token_ids) == len(span.completion_logprobs) == message.usage.output_tokens


def test_system_role_inside_messages_is_rendered(session, control):
    client = client_for(session)
    client.messages.create(model="policy", max_tokens=16, messages=[
        {"role": "user", "content": "hi"},
        {"role": "system", "content": "Mid-conversation instruction."},
    ])
    [span] = control.spans(session.rollout_id)
    assert span.messages[-1] == {"role": "system", "content": "Mid-conversation instruction."}


def test_stream_helper_matches_recorded_response(session, control):
    client = client_for(session)
    with client.messages.stream(model="policy", max_tokens=64,
                                messages=[{"role": "user", "content": "tell me a story"}]) as stream:
        streamed_text = "".join(stream.text_stream)
        final = stream.get_final_message()
    [span] = control.spans(session.rollout_id)
    recorded = span.response
    assert final.id == recorded["id"]
    assert final.stop_reason == recorded["stop_reason"]
    assert [b.model_dump(exclude_none=True) for b in final.content] == recorded["content"]
    assert streamed_text == "".join(b["text"] for b in recorded["content"] if b["type"] == "text")


def _tool_loop(client, *, stream: bool) -> str:
    messages = [{"role": "user", "content": "What is the weather in Paris and London?"}]
    for _ in range(3):
        if stream:
            with client.messages.stream(model="policy", max_tokens=256, tools=[WEATHER], messages=messages) as s:
                reply = s.get_final_message()
        else:
            reply = client.messages.create(model="policy", max_tokens=256, tools=[WEATHER], messages=messages)
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        if reply.stop_reason != "tool_use":
            return "".join(b.text for b in reply.content if b.type == "text")
        results = [{"type": "tool_result", "tool_use_id": b.id, "content": fake_weather(b.input["city"])}
                   for b in reply.content if b.type == "tool_use"]
        messages.append({"role": "user", "content": results})
    raise AssertionError("tool loop did not finish")


def test_three_turn_tool_use_loop_is_bridged(session, control):
    assert _tool_loop(client_for(session), stream=False) == "Paris is sunny and London is rainy."
    spans = control.spans(session.rollout_id)
    assert [s.response["stop_reason"] for s in spans] == ["tool_use", "tool_use", "end_turn"]
    tool_use = [b for b in spans[0].response["content"] if b["type"] == "tool_use"]
    assert tool_use[0]["input"] == {"city": "Paris"} and tool_use[0]["id"].startswith("toolu_")
    assert spans[1].messages[-1]["role"] == "tool"
    assert_bridged_chain(spans)


def test_streamed_tool_use_loop_is_bridged(session, control):
    assert _tool_loop(client_for(session), stream=True) == "Paris is sunny and London is rainy."
    spans = control.spans(session.rollout_id)
    assert len(spans) == 3
    assert_bridged_chain(spans)


def test_stop_sequence(session, control):
    reply = client_for(session).messages.create(
        model="policy", max_tokens=64, stop_sequences=["STOP"], messages=[{"role": "user", "content": "say stop"}])
    assert reply.stop_reason == "stop_sequence" and reply.stop_sequence == "STOP"
    [span] = control.spans(session.rollout_id)
    assert "world" not in span.response["content"][0]["text"]
    # The kept ids are an exact prefix of what was sampled: still trainable, and a finished reply (the
    # client's own stop), which `grpo.mask_truncated_completions` must not take for a truncated one.
    assert len(span.completion_token_ids) == len(span.completion_logprobs)
    assert span.stop_sequence == "STOP"
    assert unfinished_rows(build_episode([span]), [span]) == []


def test_count_tokens_equals_rendered_prompt(session, control, proxy):
    client = client_for(session)
    messages = [{"role": "user", "content": "What is the weather in Paris and London?"}]
    counted = client.messages.count_tokens(model="policy", tools=[WEATHER], messages=messages)
    client.messages.create(model="policy", max_tokens=256, tools=[WEATHER], messages=messages)
    [span] = control.spans(session.rollout_id)  # count_tokens records no span
    assert counted.input_tokens == len(span.prompt_token_ids)


def test_client_max_tokens_below_the_cap_gives_max_tokens(session, control):
    reply = client_for(session).messages.create(
        model="policy", max_tokens=2, tools=[WEATHER],
        messages=[{"role": "user", "content": "What is the weather in Paris and London?"}])
    assert reply.stop_reason == "max_tokens"
    [span] = control.spans(session.rollout_id)
    assert span.sampling["max_tokens"] == 2 and len(span.completion_token_ids) == 2
