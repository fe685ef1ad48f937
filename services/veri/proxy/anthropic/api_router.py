"""Anthropic routes under /r/{rollout_id}/v1: messages (plain and streamed), count_tokens."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import ORJSONResponse, StreamingResponse

from veri.core.records import Protocol
from veri.proxy.anthropic import serving
from veri.proxy.anthropic.converter import to_chat_turn
from veri.proxy.anthropic.protocol import MessagesRequest
from veri.proxy.deps import capture_service, parse_body, served_model
from veri.proxy.requests import presented_key, read_json_body

router = APIRouter(prefix="/r/{rollout_id}/v1")


@router.post("/messages")
async def messages(rollout_id: str, request: Request):
    capture = capture_service(request)
    session = capture.store.authorize(rollout_id, presented_key(request))
    body = await read_json_body(request, capture.settings.max_body_bytes)
    parsed = parse_body(MessagesRequest, body)
    sample = await capture.sample(
        session, to_chat_turn(parsed), path="/v1/messages", protocol=Protocol.ANTHROPIC_MESSAGES,
        raw_request=body, tool_id_prefix="toolu_",
    )
    response = serving.messages_response(sample, served_model(request))
    capture.record(sample, response)
    if parsed.stream:
        return StreamingResponse(serving.messages_stream(response), media_type="text/event-stream")
    return ORJSONResponse(response)


@router.post("/messages/count_tokens")
async def count_tokens(rollout_id: str, request: Request):
    capture = capture_service(request)
    capture.store.authorize(rollout_id, presented_key(request))
    body = await read_json_body(request, capture.settings.max_body_bytes)
    turn = to_chat_turn(parse_body(MessagesRequest, body))
    return {"input_tokens": capture.rendering.count_tokens(turn.messages, turn.tools)}
