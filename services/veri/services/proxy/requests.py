"""Reading a harness's request: the rollout's key, the body (size-capped), JSON."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import Request

from veri.services.proxy.errors import BodyTooLarge, InvalidRequest


def presented_key(request: Request) -> str | None:
    """The key an OpenAI (Authorization: Bearer) or Anthropic (x-api-key) client sent."""
    if key := request.headers.get("x-api-key"):
        return key
    auth = request.headers.get("authorization", "")
    scheme, _, token = auth.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


async def read_json_body(request: Request, limit: int) -> dict[str, Any]:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"request body of {declared} bytes exceeds the proxy's limit of {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"request body exceeds the proxy's limit of {limit} bytes")
        chunks.append(chunk)
    raw = b"".join(chunks)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise InvalidRequest("request body must be a JSON object")
    _check_depth(body, raw)
    return body


# The tools render as one block whose token attribution (renderers' attribute_text_segments) costs
# tokens x tools, on the event loop: 256 tools take ~0.5 s, 10k took ~5 min and stalled every rollout.
# OpenAI's own API takes at most 128.
MAX_TOOLS = 256


def check_tool_count(body: dict[str, Any]) -> None:
    tools = body.get("tools")
    if isinstance(tools, list) and len(tools) > MAX_TOOLS:
        raise InvalidRequest(f"the request offers {len(tools)} tools; the proxy takes at most {MAX_TOOLS} per call "
                             "(rendering cost grows with their number squared): offer fewer", param="tools")


# orjson reads 1024 levels of nesting but writes only 255, and every request is written back (its retry
# key, the span's raw request): a deeper one would fail after it was read, as a 500.
MAX_DEPTH = 254


def _check_depth(body: dict[str, Any], raw: bytes) -> None:
    if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:  # cannot nest that deep: no second pass
        return
    try:
        orjson.dumps(body)
    except TypeError as exc:
        raise InvalidRequest(f"request body nests arrays/objects deeper than {MAX_DEPTH} levels, which the proxy "
                             "cannot record: send a flatter body (e.g. a deep value as a JSON string)") from exc
