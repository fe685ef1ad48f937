"""Anthropic Messages -> the OpenAI-style ChatTurn the capture path renders.

Small steps, each testable alone: system, each message's blocks, tools, tool_choice.
"""

from __future__ import annotations

import json
from typing import Any

from veri.core.records import HostedTools
from veri.services.proxy.anthropic.protocol import AnthropicMessage, MessagesRequest
from veri.services.proxy.errors import HostedToolsRefused, InvalidRequest, UnsupportedContent
from veri.services.proxy.samples import ChatTurn

_UNSUPPORTED_BLOCKS = {"image", "document", "audio", "input_audio", "file", "container_upload"}
_IGNORED_BLOCKS = {"redacted_thinking"}  # opaque to a token-native policy; never rendered


def to_chat_turn(request: MessagesRequest, hosted_tools: HostedTools = HostedTools.DROP) -> ChatTurn:
    """`hosted_tools`: what the job does with server tools (Anthropic runs them; dropped, or refused)."""
    messages = _system_messages(request.system)
    for index, message in enumerate(request.messages):
        messages.extend(_convert_message(index, message))
    if not messages:  # e.g. one user message with `content: []`: the renderer has nothing to render
        raise InvalidRequest("messages: no message has any content; send at least one text block", param="messages")
    tools = _convert_tools(request.tools)
    dropped = server_tool_types(request.tools or [])
    if dropped and hosted_tools == HostedTools.REFUSE:
        raise HostedToolsRefused(dropped)
    return ChatTurn(
        messages=messages,
        tools=tools,
        parse_tools=bool(tools) and (request.tool_choice or {}).get("type") != "none",
        stop=list(request.stop_sequences or []),
        max_tokens=request.max_tokens,
        hosted_tools_dropped=dropped,
    )


def _system_messages(system: str | list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    if not system:
        return []
    text = system if isinstance(system, str) else _joined_text(system, "system")
    return [{"role": "system", "content": text}]


def _joined_text(blocks: list[dict[str, Any]], where: str) -> str:
    texts = []
    for block in blocks:
        kind = block.get("type")
        _refuse_unsupported(kind, where)
        if kind != "text":
            raise InvalidRequest(f"{where}: only text blocks are allowed here, got {kind!r}")
        texts.append(block.get("text", ""))
    return "\n".join(texts)


def _refuse_unsupported(kind: str | None, where: str) -> None:
    if kind in _UNSUPPORTED_BLOCKS:
        raise UnsupportedContent(
            f"{where} has a {kind!r} block: veri trains token-native text only (no image/document/audio path); "
            "send text instead"
        )


def _convert_message(index: int, message: AnthropicMessage) -> list[dict[str, Any]]:
    where = f"messages[{index}]"
    if isinstance(message.content, str):
        return [{"role": message.role, "content": message.content}]
    if message.role == "system":
        return [{"role": "system", "content": _joined_text(message.content, where)}]
    if message.role == "assistant":
        return [_assistant_message(where, message.content)]
    return _user_messages(where, message.content)


def _assistant_message(where: str, blocks: list[dict[str, Any]]) -> dict[str, Any]:
    texts, reasoning, calls = [], [], []
    for block in blocks:
        kind = block.get("type")
        _refuse_unsupported(kind, where)
        if kind == "text":
            texts.append(block.get("text", ""))
        elif kind == "thinking":
            reasoning.append(block.get("thinking", ""))
        elif kind == "tool_use":
            calls.append({"id": block.get("id"), "type": "function",
                          "function": {"name": block.get("name", ""),
                                       "arguments": json.dumps(block.get("input") or {}, ensure_ascii=False)}})
        elif kind not in _IGNORED_BLOCKS:
            raise InvalidRequest(f"{where}: unsupported assistant block {kind!r}")
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
    if reasoning:
        message["reasoning_content"] = "\n".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    return message


def _user_messages(where: str, blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool results become `tool` messages (in order), the user's text one `user` message after them."""
    converted, texts = [], []
    for block in blocks:
        kind = block.get("type")
        _refuse_unsupported(kind, where)
        if kind == "tool_result":
            content = block.get("content")
            plain = isinstance(content, str) or content is None
            text = content if plain else _joined_text(content, f"{where} tool_result")
            converted.append({"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": text or ""})
        elif kind == "text":
            texts.append(block.get("text", ""))
        else:
            raise InvalidRequest(f"{where}: unsupported user block {kind!r}")
    if texts:
        converted.append({"role": "user", "content": "\n".join(texts)})
    return converted


def _is_server_tool(tool: dict[str, Any]) -> bool:
    """An Anthropic-defined tool (a versioned `type`: web_search_20250305, code_execution_..., bash_...):
    it has no input_schema, so the policy has nothing to write its calls against."""
    return "input_schema" not in tool and tool.get("type") not in (None, "custom")


def server_tool_types(tools: list[dict[str, Any]]) -> list[str]:
    return sorted({str(tool["type"]) for tool in tools if _is_server_tool(tool)})


def _convert_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    converted = []
    for index, tool in enumerate(tools or []):
        if _is_server_tool(tool):
            continue
        if "input_schema" not in tool:
            raise InvalidRequest(
                f"tools[{index}] ({tool.get('name')!r}) has no input_schema: define a client tool with name,"
                " description and input_schema"
            )
        converted.append({"type": "function", "function": {
            "name": tool["name"], "description": tool.get("description", ""), "parameters": tool["input_schema"]}})
    return converted or None
