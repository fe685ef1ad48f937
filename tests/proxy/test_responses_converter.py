"""Responses input items -> chat messages, without a server: the merging that makes echoed output
match the recorded reply, and each refusal's message."""

from __future__ import annotations

import pytest

from veri.core.records import HostedTools
from veri.services.proxy.errors import HostedToolsRefused, InvalidRequest, UnsupportedContent
from veri.services.proxy.history import canonical_message
from veri.services.proxy.responses.converter import to_chat_turn
from veri.services.proxy.responses.protocol import ResponsesRequest


def turn(**body):
    return to_chat_turn(ResponsesRequest.model_validate(body), [])


def test_echoed_output_items_become_the_recorded_reply_message():
    """reasoning + message + two function calls (as the proxy answers them) -> one assistant message."""
    items = [
        {"role": "developer", "content": "Be careful."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque",
         "content": [{"type": "reasoning_text", "text": "Check both."}]},
        {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Looking.", "annotations": []}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "get_weather",
         "arguments": '{"city":"Paris"}'},
        {"type": "function_call", "id": "fc_2", "call_id": "call_b", "name": "get_weather",
         "arguments": '{"city": "London"}'},
        {"type": "function_call_output", "call_id": "call_a", "output": "sunny"},
        {"type": "function_call_output", "call_id": "call_b", "output": [{"type": "input_text", "text": "rainy"}]},
        {"type": "function_call", "call_id": "call_c", "name": "get_weather", "arguments": '{"city": "Rome"}'},
    ]
    messages = turn(instructions="Use tools.", input=items).messages
    assert [m["role"] for m in messages] == ["system", "system", "user", "assistant", "tool", "tool", "assistant"]
    recorded_reply = {"role": "assistant", "content": "Looking.", "reasoning_content": "Check both.", "tool_calls": [
        {"id": "call_x", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        {"id": "call_y", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "London"}'}}]}
    assert canonical_message(messages[3]) == canonical_message(recorded_reply)
    assert messages[3]["reasoning_content"] == "Check both."
    assert messages[5] == {"role": "tool", "tool_call_id": "call_b", "content": "rainy"}
    assert messages[6]["content"] == "" and messages[6]["tool_calls"][0]["id"] == "call_c"


def test_a_plain_assistant_answer_has_no_tool_calls_key():
    messages = turn(input=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                           {"role": "user", "content": "bye"}]).messages
    assert messages[1] == {"role": "assistant", "content": "hello"}


def test_function_tools_convert_and_tool_choice_none_keeps_text():
    tool = {"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}, "strict": True}
    converted = turn(input="x", tools=[tool], tool_choice="none")
    assert converted.tools == [{"type": "function", "function": {"name": "f", "description": "d",
                                                                 "parameters": {"type": "object"}}}]
    assert converted.parse_tools is False
    assert turn(input="x", tools=[tool], max_output_tokens=7).max_tokens == 7


@pytest.mark.parametrize(("body", "error", "says"), [
    ({"input": "x", "tool_choice": {"type": "file_search"}}, InvalidRequest, "names a hosted tool"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, InvalidRequest, "send the item itself"),
    ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, InvalidRequest, "'web_search_call'"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, UnsupportedContent,
     "'input_file'"),
    ({"input": "x", "background": True}, InvalidRequest, "without background"),
    ({"input": "x", "conversation": "conv_1"}, InvalidRequest, "previous_response_id or the full input"),
    ({"input": []}, InvalidRequest, "input is empty"),
    ({"input": [{"role": "tool", "content": "x"}]}, InvalidRequest, "role must be"),
])
def test_refusals_name_the_fix(body, error, says):
    with pytest.raises(error) as raised:
        turn(**body)
    assert says in raised.value.message


def test_namespace_tools_are_flattened_and_clashing_names_refused():
    inner = {"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}}
    namespace = {"type": "namespace", "name": "multi_agent_v1", "description": "sub-agents", "tools": [inner]}
    converted = turn(input="x", tools=[{"type": "function", "name": "exec_command"}, namespace]).tools
    assert [tool["function"]["name"] for tool in converted] == ["exec_command", "spawn_agent"]
    with pytest.raises(InvalidRequest, match="share a name"):
        turn(input="x", tools=[{"type": "function", "name": "spawn_agent"}, namespace])
    hosted = turn(input="x", tools=[{**namespace, "tools": [inner, {"type": "web_search"}]}])
    assert [tool["function"]["name"] for tool in hosted.tools] == ["spawn_agent"]
    assert hosted.hosted_tools_dropped == ["web_search"]


def test_hosted_tools_are_dropped_by_default_and_refused_when_the_job_says_so():
    tools = [{"type": "web_search_preview"}, {"type": "function", "name": "f"}, {"type": "file_search"}]
    dropped = turn(input="x", tools=tools)
    assert [tool["function"]["name"] for tool in dropped.tools] == ["f"] and dropped.parse_tools
    assert dropped.hosted_tools_dropped == ["file_search", "web_search_preview"]
    alone = turn(input="x", tools=[{"type": "web_search"}])
    assert alone.tools is None and not alone.parse_tools and alone.hosted_tools_dropped == ["web_search"]
    assert turn(input="x", tools=[tools[1]]).hosted_tools_dropped == []
    with pytest.raises(HostedToolsRefused) as refused:
        to_chat_turn(ResponsesRequest.model_validate({"input": "x", "tools": tools}), [], HostedTools.REFUSE)
    assert refused.value.param == "tools"
    assert "file_search, web_search_preview are hosted tools" in refused.value.message
    assert "hosted_tools: refuse" in refused.value.message and "hosted_tools: drop" in refused.value.message
