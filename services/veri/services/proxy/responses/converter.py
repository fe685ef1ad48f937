"""Responses `input` items, `instructions` and `tools` -> the OpenAI-style ChatTurn the capture path renders.

Output items the client passes back (reasoning, an assistant message, function calls) are merged
into one assistant message, the shape the proxy recorded as the reply, so echoed history matches
the earlier span and the next call is bridged from its exact ids.
"""

from __future__ import annotations

from typing import Any

from veri.core.records import HostedTools
from veri.services.proxy.errors import HostedToolsRefused, InvalidRequest, UnsupportedContent
from veri.services.proxy.responses.protocol import ResponsesRequest
from veri.services.proxy.samples import ChatTurn

_UNSUPPORTED_PARTS = {"input_image", "input_file", "input_audio", "image_url", "file"}
_TEXT_PARTS = {"input_text", "output_text", "text", "summary_text", "reasoning_text", "refusal"}
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


def to_chat_turn(request: ResponsesRequest, earlier: list[dict[str, Any]],
                 hosted_tools: HostedTools = HostedTools.DROP) -> ChatTurn:
    """`earlier`: the conversation `previous_response_id` names (its instructions left out);
    `hosted_tools`: what the job does with the request's hosted tools (dropped, or refused)."""
    _refuse_unserved(request)
    messages = [{"role": "system", "content": request.instructions}] if request.instructions else []
    messages.extend(earlier)
    messages.extend(input_messages(request.input))
    if not messages:
        raise InvalidRequest("input is empty: send a string or at least one input item", param="input")
    tools = convert_tools(request.tools)
    dropped = hosted_tool_types(request.tools or [])
    if dropped and hosted_tools == HostedTools.REFUSE:
        raise HostedToolsRefused(dropped)
    return ChatTurn(
        messages=messages,
        tools=tools,
        parse_tools=bool(tools) and request.tool_choice != "none",
        max_tokens=request.max_output_tokens,
        hosted_tools_dropped=dropped,
    )



def _refuse_unserved(request: ResponsesRequest) -> None:
    if request.background:
        raise InvalidRequest("background responses are not served: send the request without background",
                             param="background")
    if request.conversation is not None:
        raise InvalidRequest("the Conversations API is not served: pass previous_response_id or the full input",
                             param="conversation")
    if request.prompt is not None:
        raise InvalidRequest("stored prompt templates are not served: send instructions and input instead",
                             param="prompt")
    choice = request.tool_choice
    if isinstance(choice, dict) and choice.get("type") not in {"function", "allowed_tools"}:
        raise InvalidRequest(f"tool_choice {choice.get('type')!r} names a hosted tool: veri serves function tools "
                             "only; use auto, none, required or a function", param="tool_choice")


def input_messages(items: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    messages: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        kind = item.get("type") or ("message" if "role" in item else None)
        where = f"input[{index}]"
        if kind == "message":
            _add_message(messages, where, item)
        elif kind == "function_call":
            _open_assistant(messages, opens_new=False)["tool_calls"].append(_tool_call(where, item))
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"),
                             "content": _text(where, item.get("output"))})
        elif kind == "reasoning":
            text = _reasoning_text(where, item)
            if text:
                assistant = _open_assistant(messages, opens_new=True)
                assistant["reasoning_content"] = "\n".join(filter(None, [assistant.get("reasoning_content"), text]))
        elif kind == "item_reference":
            raise InvalidRequest(f"{where} is an item_reference: send the item itself", param=where)
        else:
            raise InvalidRequest(
                f"{where} has type {kind!r}: veri serves message, function_call, function_call_output and "
                "reasoning items (hosted tools' calls have no token-native rendering)", param=where)
    return [_tidy(message) for message in messages]


def _add_message(messages: list[dict[str, Any]], where: str, item: dict[str, Any]) -> None:
    role = _ROLES.get(item.get("role", ""))
    if role is None:
        raise InvalidRequest(f"{where}: role must be user, assistant, system or developer, got {item.get('role')!r}",
                             param=where)
    text = _text(where, item.get("content"))
    if role == "assistant":
        assistant = _open_assistant(messages, opens_new=True)
        assistant["content"] += text
    else:
        messages.append({"role": role, "content": text})


def _open_assistant(messages: list[dict[str, Any]], *, opens_new: bool) -> dict[str, Any]:
    """The assistant message output items join: the last one, unless it already holds what this
    item would come after (a message or reasoning item after text or calls starts a new turn)."""
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant" and not (opens_new and (last["content"] or last["tool_calls"])):
        return last
    assistant: dict[str, Any] = {"role": "assistant", "content": "", "tool_calls": []}
    messages.append(assistant)
    return assistant


def _tidy(message: dict[str, Any]) -> dict[str, Any]:
    if message["role"] == "assistant" and not message.get("tool_calls"):
        message.pop("tool_calls", None)
    return message


def _tool_call(where: str, item: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(item.get("name"), str) or not item.get("call_id"):
        raise InvalidRequest(f"{where}: a function_call needs name and call_id", param=where)
    arguments = item.get("arguments")
    return {"id": item["call_id"], "type": "function",
            "function": {"name": item["name"], "arguments": arguments if isinstance(arguments, str) else "{}"}}


def _text(where: str, content: Any) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise InvalidRequest(f"{where}: content must be a string or a list of parts", param=where)
    texts = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _UNSUPPORTED_PARTS:
            raise UnsupportedContent(f"{where} has a {kind!r} part: veri trains token-native text only; send text",
                                     param=where)
        if kind not in _TEXT_PARTS:
            raise InvalidRequest(f"{where} has an unknown content part {kind!r}", param=where)
        texts.append(part.get("text") or part.get("refusal") or "")
    return "".join(texts)


def _reasoning_text(where: str, item: dict[str, Any]) -> str:
    """The reasoning as sampled (content), else its summary. Encrypted reasoning has no local meaning."""
    for key in ("content", "summary"):
        if item.get(key):
            return _text(where, item[key])
    return ""


def convert_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Function tools, those grouped in a `namespace` tool (Codex's sub-agent tools) included; None
    when there are none (hosted tools are not among them: see `hosted_tool_types`)."""
    functions = function_tools(tools or [])
    if not functions:
        return None
    converted = []
    for index, (_, tool) in enumerate(functions):
        if not tool.get("name"):
            raise InvalidRequest(f"tools[{index}] needs a name", param="tools")
        function = {"name": tool["name"], "description": tool.get("description") or "",
                    "parameters": tool.get("parameters") or {"type": "object", "properties": {}}}
        converted.append({"type": "function", "function": function})
    names = [tool["function"]["name"] for tool in converted]
    if len(set(names)) < len(names):
        raise InvalidRequest("two tools share a name (namespaces included): the policy calls tools by name alone, "
                             "so give each a distinct name", param="tools")
    return converted


def function_tools(tools: list[dict[str, Any]]) -> list[tuple[str | None, dict[str, Any]]]:
    """(namespace or None, function tool) for every function tool."""
    found: list[tuple[str | None, dict[str, Any]]] = []
    for tool in tools:
        if tool.get("type") == "function":
            found.append((None, tool))
        elif tool.get("type") == "namespace":
            found += [(tool.get("name"), t) for t in tool.get("tools") or [] if t.get("type") == "function"]
    return found


def hosted_tool_types(tools: list[dict[str, Any]]) -> list[str]:
    """The types of the hosted tools (web_search, file_search, ...), namespaces' included, sorted."""
    hosted = set()
    for tool in tools:
        if tool.get("type") == "namespace":
            hosted |= {str(t.get("type")) for t in tool.get("tools") or [] if t.get("type") != "function"}
        elif tool.get("type") != "function":
            hosted.add(str(tool.get("type")))
    return sorted(hosted)
