"""Anthropic routes under /r/{rollout_id}/v1: messages (plain and streamed), count_tokens."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from veri.core.records import Protocol
from veri.proxy.anthropic import serving
from veri.proxy.anthropic.converter import to_chat_turn
from veri.proxy.anthropic.protocol import MessagesRequest
from veri.proxy.deps import json_response, rollout_call, served_model

router = APIRouter(prefix="/r/{rollout_id}/v1")


@router.post("/messages")
async def messages(rollout_id: str, request: Request):
    call = await rollout_call(request, rollout_id, MessagesRequest)
    parsed = call.parsed
    sample = await call.capture.sample(
        call.session, to_chat_turn(parsed), path="/v1/messages", protocol=Protocol.ANTHROPIC_MESSAGES,
        raw_request=call.body, tool_id_prefix="toolu_",
    )
    response = serving.messages_response(sample, served_model(request))
    call.capture.record(sample, response)
    if parsed.stream:
        return StreamingResponse(serving.messages_stream(response), media_type="text/event-stream")
    return json_response(response)


@router.post("/messages/count_tokens")
async def count_tokens(rollout_id: str, request: Request):
    call = await rollout_call(request, rollout_id, MessagesRequest)
    turn = to_chat_turn(call.parsed)
    return {"input_tokens": call.capture.rendering.count_tokens(turn.messages, turn.tools)}
