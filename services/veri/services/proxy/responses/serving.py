"""Capture-path samples -> Responses API objects and their SSE event sequence (as the `openai`
SDK's `responses.stream` accumulator and the Codex CLI parse them)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import orjson

from veri.services.proxy.responses.converter import function_tools
from veri.services.proxy.responses.protocol import ResponsesRequest
from veri.services.proxy.samples import Sample


def _item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def output_items(sample: Sample, namespaces: dict[str, str]) -> list[dict[str, Any]]:
    """Reasoning, then the text, then the function calls: the order the reply was sampled in.
    `namespaces`: tool name -> the namespace tool it came in, which its call names."""
    items: list[dict[str, Any]] = []
    if sample.reasoning:
        items.append({"type": "reasoning", "id": _item_id("rs"), "status": "completed", "summary": [],
                      "content": [{"type": "reasoning_text", "text": sample.reasoning}]})
    if sample.content or not sample.tool_calls:
        items.append({"type": "message", "id": _item_id("msg"), "role": "assistant", "status": "completed",
                      "content": [{"type": "output_text", "text": sample.content, "annotations": [],
                                   "logprobs": []}]})
    for call in sample.tool_calls:
        item = {"type": "function_call", "id": _item_id("fc"), "call_id": call.id, "name": call.name,
                "arguments": call.arguments, "status": "completed"}
        if call.name in namespaces:
            item["namespace"] = namespaces[call.name]
        items.append(item)
    return items


def response_object(sample: Sample, request: ResponsesRequest, model: str) -> dict[str, Any]:
    truncated = sample.finish == "length"
    now = time.time()
    return {
        "id": _item_id("resp"),
        "object": "response",
        "created_at": int(sample.started_at),
        "completed_at": None if truncated else int(now),
        "status": "incomplete" if truncated else "completed",
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if truncated else None,
        "instructions": request.instructions,
        "model": model,
        "output": output_items(sample, _namespaces(request.tools or [])),
        "parallel_tool_calls": request.parallel_tool_calls if request.parallel_tool_calls is not None else True,
        "previous_response_id": request.previous_response_id,
        "store": request.store,
        # What the policy actually sampled with (the job's), not what the client asked for.
        "temperature": sample.sampling["temperature"],
        "top_p": sample.sampling["top_p"],
        "max_output_tokens": request.max_output_tokens,
        "tool_choice": request.tool_choice if request.tool_choice is not None else "auto",
        "tools": request.tools or [],
        "text": {"format": {"type": "text"}},
        "reasoning": {"effort": None, "summary": None},
        "truncation": "disabled",
        "metadata": {},
        "usage": {
            "input_tokens": sample.prompt_tokens,
            "input_tokens_details": {"cached_tokens": sample.completion.cached_prompt_tokens or 0,
                                     "cache_write_tokens": 0},
            "output_tokens": sample.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": sample.prompt_tokens + sample.completion_tokens,
        },
    }


def _namespaces(tools: list[dict[str, Any]]) -> dict[str, str]:
    return {tool["name"]: namespace for namespace, tool in function_tools(tools) if namespace}


def response_stream(response: dict[str, Any]) -> Iterator[bytes]:
    """The already-recorded response replayed as the Responses streaming events."""
    sequence = iter(range(1 << 31))

    def event(event_type: str, /, **payload: Any) -> bytes:  # positional-only: payloads carry `name`
        body = {"type": event_type, "sequence_number": next(sequence), **payload}
        return b"event: " + event_type.encode() + b"\ndata: " + orjson.dumps(body) + b"\n\n"

    pending = {**response, "status": "in_progress", "output": [], "usage": None, "incomplete_details": None,
               "completed_at": None}
    yield event("response.created", response=pending)
    yield event("response.in_progress", response=pending)
    for index, item in enumerate(response["output"]):
        yield from _item_events(event, index, item)
    final = "response.completed" if response["status"] == "completed" else "response.incomplete"
    yield event(final, response=response)


def _item_events(event: Any, index: int, item: dict[str, Any]) -> Iterator[bytes]:
    kind, item_id = item["type"], item["id"]
    where = {"item_id": item_id, "output_index": index}
    if kind == "message":
        yield event("response.output_item.added", output_index=index, item={**item, "status": "in_progress",
                                                                             "content": []})
        for position, part in enumerate(item["content"]):
            empty = {**part, "text": ""}
            yield event("response.content_part.added", **where, content_index=position, part=empty)
            yield event("response.output_text.delta", **where, content_index=position, delta=part["text"],
                        logprobs=[])
            yield event("response.output_text.done", **where, content_index=position, text=part["text"],
                        logprobs=[])
            yield event("response.content_part.done", **where, content_index=position, part=part)
    elif kind == "reasoning":
        yield event("response.output_item.added", output_index=index, item={**item, "status": "in_progress",
                                                                             "content": []})
        for position, part in enumerate(item["content"]):
            yield event("response.reasoning_text.delta", **where, content_index=position, delta=part["text"])
            yield event("response.reasoning_text.done", **where, content_index=position, text=part["text"])
    else:
        yield event("response.output_item.added", output_index=index, item={**item, "status": "in_progress",
                                                                             "arguments": ""})
        yield event("response.function_call_arguments.delta", **where, delta=item["arguments"])
        yield event("response.function_call_arguments.done", **where, name=item["name"],
                    arguments=item["arguments"])
    yield event("response.output_item.done", output_index=index, item=item)
