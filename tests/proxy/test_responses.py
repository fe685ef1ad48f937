"""The official `openai` SDK's Responses API against the capture proxy: plain, streamed, function-tool
loops (full input resent, and chained by previous_response_id), store: false, refusals."""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest
from openai.types.responses import Response
from transformers import AutoTokenizer

from testkit.proxy_script import fake_weather, proxy_args
from testkit.servers import RunningServer, start_server
from tests.proxy.conftest import assert_bridged_chain
from veri.services.proxy.control_client import ControlClient

pytestmark = pytest.mark.needs("process")

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
QUESTION = "What is the weather in Paris and London?"
ANSWER = "Paris is sunny and London is rainy."


def client_for(session) -> openai.OpenAI:
    return openai.OpenAI(base_url=session.openai_base_url, api_key=session.api_key, max_retries=0)


def test_plain_response_records_exact_tokens(session, control, tiny_model):
    reply = client_for(session).responses.create(
        model="policy", instructions="Be brief.", input="It is rainy in London", temperature=0.0,
        max_output_tokens=4096,
        reasoning={"effort": "low"}, include=["reasoning.encrypted_content"], prompt_cache_key="k-1",
    )
    [span] = control.spans(session.rollout_id)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    expected = tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "It is rainy in London"}],
        add_generation_prompt=True, tokenize=True, return_dict=False)
    assert span.protocol == "openai.responses" and span.path == "/v1/responses"
    assert span.prompt_token_ids == list(expected)
    assert span.prompt_source == "full_render"
    assert len(span.completion_token_ids) == len(span.completion_logprobs) == reply.usage.output_tokens
    assert reply.usage.input_tokens == len(span.prompt_token_ids)
    # The job's sampling wins; the client's values (and unknown fields) are recorded.
    assert span.sampling["max_tokens"] == 48 and span.request["temperature"] == 0.0
    assert span.request["prompt_cache_key"] == "k-1"
    assert reply.id == span.response["id"] and reply.id.startswith("resp_")
    assert reply.status == span.response["status"] == "completed"
    assert reply.output_text == span.reply_message["content"] == ANSWER


def test_stream_events_rebuild_the_recorded_response(session, control):
    client = client_for(session)
    with client.responses.stream(model="policy", input=[{"role": "user", "content": "It is rainy in London"}]) as s:
        events = list(s)
        final = s.get_final_response()
    [span] = control.spans(session.rollout_id)
    assert [event.type for event in events] == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.completed"]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert final.model_dump(exclude_none=True) == Response.model_validate(span.response).model_dump(exclude_none=True)
    deltas = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert deltas == final.output_text == span.reply_message["content"] == ANSWER
    assert span.request["stream"] is True


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_cut_short_reply_is_incomplete(session, control, stream):
    """max_output_tokens reached: status incomplete, and a streamed reply ends in response.incomplete."""
    request = {"model": "policy", "input": "It is rainy in London", "max_output_tokens": 3}
    if stream:
        events = list(client_for(session).responses.create(stream=True, **request))
        assert events[-1].type == "response.incomplete"
        reply = events[-1].response
    else:
        reply = client_for(session).responses.create(**request)
    [span] = control.spans(session.rollout_id)
    assert reply.status == "incomplete" and reply.incomplete_details.reason == "max_output_tokens"
    assert span.finish_reason == "length" and len(span.completion_token_ids) == 3
    assert reply.output_text == span.reply_message["content"] and ANSWER.startswith(reply.output_text)


def _call(client, *, stream: bool, **kwargs):
    if not stream:
        return client.responses.create(model="policy", tools=[WEATHER], **kwargs)
    with client.responses.stream(model="policy", tools=[WEATHER], **kwargs) as events:
        arguments = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
        final = events.get_final_response()
    assert arguments == "".join(item.arguments for item in final.output if item.type == "function_call")
    return final


def _tool_outputs(reply) -> list[dict]:
    return [{"type": "function_call_output", "call_id": item.call_id,
             "output": fake_weather(json.loads(item.arguments)["city"])}
            for item in reply.output if item.type == "function_call"]


def _loop_resending_input(client, *, stream: bool) -> str:
    """What most harnesses do: the whole conversation every call, the output items echoed back."""
    items: list = [{"role": "user", "content": QUESTION}]
    for _ in range(3):
        reply = _call(client, stream=stream, instructions="Use the tool.", input=items)
        items += [item.model_dump(exclude_none=True) for item in reply.output]
        if not _tool_outputs(reply):
            return reply.output_text
        items += _tool_outputs(reply)
    raise AssertionError("tool loop did not finish")


def _loop_chained(client, *, stream: bool) -> str:
    """Only the new items each call; the conversation comes from previous_response_id."""
    reply = _call(client, stream=stream, instructions="Use the tool.", input=QUESTION)
    for _ in range(2):
        if not _tool_outputs(reply):
            break
        reply = _call(client, stream=stream, instructions="Use the tool.", input=_tool_outputs(reply),
                      previous_response_id=reply.id)
    return reply.output_text


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("loop", [_loop_resending_input, _loop_chained], ids=["full-input", "previous-id"])
def test_three_turn_function_tool_loop_is_bridged(session, control, loop, stream):
    assert loop(client_for(session), stream=stream) == ANSWER
    spans = control.spans(session.rollout_id)
    assert len(spans) == 3
    assert [s.reply_message.get("tool_calls", [{}])[0].get("function", {}).get("arguments") for s in spans] == [
        '{"city": "Paris"}', '{"city": "London"}', None]
    assert [s.response["output"][-1]["type"] for s in spans] == ["function_call", "function_call", "message"]
    assert spans[2].messages[0] == {"role": "system", "content": "Use the tool."}
    assert [m["role"] for m in spans[2].messages] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert_bridged_chain(spans)


def test_previous_response_drops_its_instructions(session, control):
    client = client_for(session)
    first = client.responses.create(model="policy", tools=[WEATHER], instructions="Old rules.", input=QUESTION)
    client.responses.create(model="policy", tools=[WEATHER], instructions="New rules.", input=_tool_outputs(first),
                            previous_response_id=first.id)
    spans = control.spans(session.rollout_id)
    assert spans[1].messages[0] == {"role": "system", "content": "New rules."}
    assert [m["content"] for m in spans[1].messages[:2]] == ["New rules.", QUESTION]
    # New instructions rewrite the start of the conversation: a full render that says so.
    assert spans[1].prompt_source == "full_render" and "history rewritten" in spans[1].prompt_source_reason


def test_store_false_is_recorded_and_cannot_be_continued(session, control):
    client = client_for(session)
    first = client.responses.create(model="policy", tools=[WEATHER], input=QUESTION, store=False)
    assert first.store is False
    with pytest.raises(openai.BadRequestError) as error:
        client.responses.create(model="policy", tools=[WEATHER], input=_tool_outputs(first),
                                previous_response_id=first.id)
    assert "store: false" in error.value.message and error.value.param == "previous_response_id"
    # Resending the full input (what Codex does with store: false) continues it, bridged.
    items = [{"role": "user", "content": QUESTION}, *[i.model_dump(exclude_none=True) for i in first.output],
             *_tool_outputs(first)]
    client.responses.create(model="policy", tools=[WEATHER], input=items, store=False)
    spans = control.spans(session.rollout_id)
    assert len(spans) == 2 and spans[0].request["store"] is False
    assert_bridged_chain(spans)


def test_unknown_previous_response_id_is_refused(session, control):
    other = control.open_session()
    elsewhere = client_for(other).responses.create(model="policy", input="hello")
    with pytest.raises(openai.BadRequestError) as error:
        client_for(session).responses.create(model="policy", input="again", previous_response_id=elsewhere.id)
    assert "not a response of this rollout" in error.value.message
    assert control.spans(session.rollout_id) == []


HOSTED_TOOLS = [{"type": "web_search"}, {"type": "file_search", "vector_store_ids": ["vs_1"]},
                {"type": "computer_use_preview", "display_width": 1024, "display_height": 768,
                 "environment": "browser"}]


@pytest.fixture(scope="module")
def refusing_proxy(scripted_policy, tiny_model, tmp_path_factory) -> Iterator[RunningServer]:
    args = proxy_args(scripted_policy.url, tiny_model, tmp_path_factory.mktemp("spans"), "--hosted-tools", "refuse")
    with start_server(args) as server:
        yield server


@pytest.mark.parametrize("tool", HOSTED_TOOLS)
def test_hosted_tools_are_dropped_from_the_prompt_and_named_on_the_span(session, control, tool):
    """By default (hosted_tools: drop) the call is served with the function tools alone."""
    client_for(session).responses.create(model="policy", input="search the web", tools=[WEATHER, tool])
    [span] = control.spans(session.rollout_id)
    assert span.hosted_tools_dropped == [tool["type"]]
    assert [t["function"]["name"] for t in span.tools] == ["get_weather"]
    assert span.request["tools"][1]["type"] == tool["type"]  # the client's body, as sent


@pytest.mark.parametrize("tool", HOSTED_TOOLS)
def test_hosted_tools_refused_in_the_responses_error_shape_under_refuse(refusing_proxy, tool):
    control = ControlClient(refusing_proxy.url)
    session = control.open_session()
    with pytest.raises(openai.BadRequestError) as error:
        client_for(session).responses.create(model="policy", input="search the web", tools=[WEATHER, tool])
    body = error.value.body
    assert body["type"] == "invalid_request_error" and body["param"] == "tools"
    assert tool["type"] in body["message"] and "hosted_tools: refuse" in body["message"]
    assert "hosted_tools: drop" in body["message"] and "define them as type function" in body["message"]
    assert control.spans(session.rollout_id) == []


def test_image_input_is_refused_by_name(session, control):
    with pytest.raises(openai.BadRequestError) as error:
        client_for(session).responses.create(model="policy", input=[{"role": "user", "content": [
            {"type": "input_text", "text": "what is this"},
            {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}])
    assert "'input_image'" in error.value.message
    assert control.spans(session.rollout_id) == []


def test_a_call_to_a_namespaced_tool_names_its_namespace(session, control):
    """Codex groups its sub-agent tools in a `namespace` tool; the policy sees them as functions."""
    namespace = {"type": "namespace", "name": "weather_ns", "description": "weather tools", "tools": [WEATHER]}
    reply = client_for(session).responses.create(model="policy", input=QUESTION, tools=[namespace])
    [call] = [item for item in reply.output if item.type == "function_call"]
    assert (call.namespace, call.name, call.arguments) == ("weather_ns", "get_weather", '{"city": "Paris"}')
    [span] = control.spans(session.rollout_id)
    assert [tool["function"]["name"] for tool in span.tools] == ["get_weather"]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_sampled_reasoning_is_a_reasoning_item_and_passes_back_bridged(session, control, stream):
    client = client_for(session)
    if stream:
        with client.responses.stream(model="policy", input="Please think it over") as events:
            kinds = [event.type for event in events]
            first = events.get_final_response()
        assert kinds[2:6] == ["response.output_item.added", "response.reasoning_text.delta",
                              "response.reasoning_text.done", "response.output_item.done"]
    else:
        first = client.responses.create(model="policy", input="Please think it over")
    assert [item.type for item in first.output] == ["reasoning", "message"]
    assert first.output[0].content[0].text.strip() == "The user wants a plan."
    assert first.output_text == "Plan: none."
    items = [{"role": "user", "content": "Please think it over"},
             *[item.model_dump(exclude_none=True) for item in first.output],
             {"role": "user", "content": "It is rainy in London"}]
    client.responses.create(model="policy", input=items)
    spans = control.spans(session.rollout_id)
    assert spans[1].messages[1]["reasoning_content"].strip() == "The user wants a plan."
    assert_bridged_chain(spans)
