"""Capture-path samples -> Anthropic Messages responses and their SSE event sequence."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import orjson

from veri.services.proxy.samples import Sample

_STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens", "stop_sequence": "stop_sequence"}


def content_blocks(sample: Sample) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if sample.reasoning:
        # No signature exists for a local policy; the empty one round-trips through clients unchanged.
        blocks.append({"type": "thinking", "thinking": sample.reasoning, "signature": ""})
    if sample.content or not sample.tool_calls:
        blocks.append({"type": "text", "text": sample.content})
    blocks.extend({"type": "tool_use", "id": call.id, "name": call.name, "input": call.input}
                  for call in sample.tool_calls)
    return blocks


def messages_response(sample: Sample, model: str) -> dict[str, Any]:
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content_blocks(sample),
        "stop_reason": _STOP_REASONS[sample.finish],
        "stop_sequence": sample.stop_sequence,
        "usage": {"input_tokens": sample.prompt_tokens, "output_tokens": sample.completion_tokens,
                  "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
    }


def messages_stream(response: dict[str, Any]) -> Iterator[bytes]:
    """The already-recorded response replayed as Anthropic's streaming events."""
    start = {**response, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {**response["usage"], "output_tokens": 0}}
    yield _event("message_start", {"type": "message_start", "message": start})
    for index, block in enumerate(response["content"]):
        yield from _block_events(index, block)
    yield _event("message_delta", {
        "type": "message_delta",
        "delta": {"stop_reason": response["stop_reason"], "stop_sequence": response["stop_sequence"]},
        "usage": {"output_tokens": response["usage"]["output_tokens"]},
    })
    yield _event("message_stop", {"type": "message_stop"})


def _block_events(index: int, block: dict[str, Any]) -> Iterator[bytes]:
    kind = block["type"]
    if kind == "text":
        start, deltas = {"type": "text", "text": ""}, [{"type": "text_delta", "text": block["text"]}]
    elif kind == "thinking":
        start = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [{"type": "thinking_delta", "thinking": block["thinking"]},
                  {"type": "signature_delta", "signature": block["signature"]}]
    else:
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": orjson.dumps(block["input"]).decode()}]
    yield _event("content_block_start", {"type": "content_block_start", "index": index, "content_block": start})
    for delta in deltas:
        yield _event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
    yield _event("content_block_stop", {"type": "content_block_stop", "index": index})


def _event(name: str, payload: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"
