"""Reading a harness's request: the rollout's key, the body (size-capped), JSON."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import Request

from veri.proxy.errors import BodyTooLarge, InvalidRequest


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
    try:
        body = orjson.loads(b"".join(chunks))
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise InvalidRequest("request body must be a JSON object")
    return body
