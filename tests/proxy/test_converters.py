"""Pure conversion steps, no servers: Anthropic -> chat turn, canonical history matching."""

from __future__ import annotations

import pytest

from veri.core.records import HostedTools
from veri.services.proxy.anthropic.converter import to_chat_turn
from veri.services.proxy.anthropic.protocol import MessagesRequest
from veri.services.proxy.errors import HostedToolsRefused, InvalidRequest, UnsupportedContent
from veri.services.proxy.history import first_difference, prefix_hashes


def turn(**body):
    return to_chat_turn(MessagesRequest.model_validate({"model": "m", "max_tokens": 10, **body}))


def test_claude_code_shaped_request_converts():
    converted = turn(
        system=[{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
        tools=[{"name": "Bash", "description": "run", "input_schema": {"type": "object"}}],
        messages=[
            {"role": "system", "content": "reminder"},
            {"role": "user", "content": [{"type": "text", "text": "<system-reminder>x</system-reminder>"},
                                         {"type": "text", "text": "do it"}]},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm", "signature": ""},
                                              {"type": "text", "text": "ok"},
                                              {"type": "tool_use", "id": "toolu_1", "name": "Bash",
                                               "input": {"command": "ls"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                          "content": [{"type": "text", "text": "a.txt"}]},
                                         {"type": "text", "text": "continue"}]},
        ],
        tool_choice={"type": "auto"},
    )
    assert [m["role"] for m in converted.messages] == ["system", "system", "user", "assistant", "tool", "user"]
    assert converted.messages[2]["content"] == "<system-reminder>x</system-reminder>\ndo it"
    assistant = converted.messages[3]
    assert assistant["reasoning_content"] == "hmm"
    assert assistant["tool_calls"][0]["function"] == {"name": "Bash", "arguments": '{"command": "ls"}'}
    assert converted.messages[4] == {"role": "tool", "tool_call_id": "toolu_1", "content": "a.txt"}
    assert converted.tools[0]["function"]["parameters"] == {"type": "object"}
    assert converted.parse_tools


@pytest.mark.parametrize("block", ["image", "document"])
def test_media_blocks_are_refused_by_name(block):
    with pytest.raises(UnsupportedContent, match=f"'{block}'"):
        turn(messages=[{"role": "user", "content": [{"type": block, "source": {}}]}])
    with pytest.raises(UnsupportedContent, match=f"'{block}'"):
        turn(messages=[{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t", "content": [{"type": block, "source": {}}]}]}])


def test_server_tools_are_dropped_by_default_and_refused_when_the_job_says_so():
    bash = {"name": "Bash", "input_schema": {"type": "object"}}
    server = {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}
    body = {"messages": [{"role": "user", "content": "hi"}], "tools": [server, bash]}
    dropped = turn(**body)
    assert [tool["function"]["name"] for tool in dropped.tools] == ["Bash"]
    assert dropped.hosted_tools_dropped == ["web_search_20250305"]
    request = MessagesRequest.model_validate({"model": "m", "max_tokens": 10, **body})
    with pytest.raises(HostedToolsRefused, match="web_search_20250305 are hosted tools.*hosted_tools: refuse"):
        to_chat_turn(request, HostedTools.REFUSE)


def test_a_client_tool_without_input_schema_is_refused_with_the_fix():
    with pytest.raises(InvalidRequest, match="input_schema"):
        turn(messages=[{"role": "user", "content": "hi"}], tools=[{"name": "web"}])


def test_tool_choice_none_keeps_tool_text_as_text():
    converted = turn(messages=[{"role": "user", "content": "hi"}], tool_choice={"type": "none"},
                     tools=[{"name": "Bash", "input_schema": {"type": "object"}}])
    assert not converted.parse_tools


def test_echoed_replies_match_whatever_the_client_shape():
    ours = {"role": "assistant", "content": "ok ", "reasoning_content": "r",
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]}
    echoed = {"role": "assistant", "content": [{"type": "text", "text": "ok"}],
              "tool_calls": [{"id": "toolu_x", "function": {"name": "f", "arguments": '{"a":1}'}}]}
    user = {"role": "user", "content": "q"}
    assert prefix_hashes(None, [user, ours]) == prefix_hashes(None, [user, echoed])
    assert prefix_hashes([{"x": 1}], [user]) != prefix_hashes(None, [user])


def test_first_difference_names_the_message():
    earlier = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    assert first_difference(earlier, [{"role": "user", "content": "A"}, *earlier[1:]]) == \
        "message 0 (user) differs in content"
