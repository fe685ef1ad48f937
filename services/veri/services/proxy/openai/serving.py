"""OpenAI chat/completions <-> the capture path: request conversion, responses, SSE chunks."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import orjson

from veri.services.proxy.errors import InvalidRequest, UnsupportedContent
from veri.services.proxy.openai.protocol import ChatCompletionRequest, ChatMessage
from veri.services.proxy.samples import ChatTurn, Sample

_UNSUPPORTED_PARTS = {"image_url", "input_audio", "file", "image", "audio", "input_image", "input_file"}


def to_chat_turn(request: ChatCompletionRequest) -> ChatTurn:
    tools = [tool.model_dump(exclude_none=True) for tool in request.tools] if request.tools else None
    for tool in tools or []:
        if not tool["function"].get("name"):
            raise InvalidRequest("every tool needs function.name", param="tools")
    stop = [request.stop] if isinstance(request.stop, str) else list(request.stop or [])
    return ChatTurn(
        messages=[_convert_message(index, message) for index, message in enumerate(request.messages)],
        tools=tools,
        parse_tools=bool(tools) and request.tool_choice != "none",
        stop=stop,
        max_tokens=request.max_completion_tokens or request.max_tokens,
    )


def _convert_message(index: int, message: ChatMessage) -> dict[str, Any]:
    role = "system" if message.role == "developer" else message.role
    converted: dict[str, Any] = {"role": role, "content": _text_content(index, message.content)}
    if message.tool_calls:
        converted["tool_calls"] = [_convert_tool_call(index, call) for call in message.tool_calls]
    if message.tool_call_id:
        converted["tool_call_id"] = message.tool_call_id
    if message.reasoning_content:
        converted["reasoning_content"] = message.reasoning_content
    return converted


def _text_content(index: int, content: str | list[dict[str, Any]] | None) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for part in content:
        kind = part.get("type")
        if kind in _UNSUPPORTED_PARTS:
            raise UnsupportedContent(
                f"messages[{index}] has a {kind!r} content part: veri trains token-native text only; "
                "send text parts", param=f"messages[{index}].content",
            )
        if kind != "text" or not isinstance(part.get("text"), str):
            raise InvalidRequest(f"messages[{index}] has an unknown content part {kind!r}",
                                 param=f"messages[{index}].content")
        texts.append(part["text"])
    return "".join(texts)


def _convert_tool_call(index: int, call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function") or {}
    if not isinstance(function.get("name"), str):
        raise InvalidRequest(f"messages[{index}].tool_calls needs function.name", param=f"messages[{index}].tool_calls")
    return {"id": call.get("id"), "type": "function",
            "function": {"name": function["name"], "arguments": function.get("arguments") or "{}"}}


def _finish_reason(sample: Sample) -> str:
    return {"stop_sequence": "stop"}.get(sample.finish, sample.finish)


def _usage(sample: Sample) -> dict[str, int]:
    return {"prompt_tokens": sample.prompt_tokens, "completion_tokens": sample.completion_tokens,
            "total_tokens": sample.prompt_tokens + sample.completion_tokens}


def chat_response(sample: Sample, model: str) -> dict[str, Any]:
    message = sample.reply_message()
    if sample.tool_calls and not message["content"]:
        message["content"] = None
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": _finish_reason(sample), "logprobs": None}],
        "usage": _usage(sample),
    }


def chat_stream(response: dict[str, Any], include_usage: bool) -> Iterator[bytes]:
    """The already-recorded response replayed as OpenAI chat.completion.chunk events."""
    head = {"id": response["id"], "object": "chat.completion.chunk", "created": response["created"],
            "model": response["model"]}
    choice = response["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _sse({**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]})

    yield chunk({"role": "assistant", "content": ""})
    if message.get("reasoning_content"):
        yield chunk({"reasoning_content": message["reasoning_content"]})
    if message.get("content"):
        yield chunk({"content": message["content"]})
    for position, call in enumerate(message.get("tool_calls") or []):
        yield chunk({"tool_calls": [{"index": position, **call}]})
    yield chunk({}, choice["finish_reason"])
    if include_usage:
        yield _sse({**head, "choices": [], "usage": response["usage"]})
    yield b"data: [DONE]\n\n"


def completion_response(text: str, finish_reason: str, prompt_tokens: int, completion_tokens: int, model: str) -> dict:
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "text": text, "finish_reason": finish_reason, "logprobs": None}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


def completion_stream(response: dict[str, Any], include_usage: bool) -> Iterator[bytes]:
    head = {key: response[key] for key in ("id", "object", "created", "model")}
    choice = response["choices"][0]
    yield _sse({**head, "choices": [{"index": 0, "text": choice["text"], "finish_reason": None, "logprobs": None}]})
    last = {"index": 0, "text": "", "finish_reason": choice["finish_reason"], "logprobs": None}
    yield _sse({**head, "choices": [last]})
    if include_usage:
        yield _sse({**head, "choices": [], "usage": response["usage"]})
    yield b"data: [DONE]\n\n"


def _sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"
