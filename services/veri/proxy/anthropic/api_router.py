"""Anthropic routes under /r/{rollout_id}/v1: messages (plain and streamed), count_tokens."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from veri.core.records import Protocol
from veri.proxy.anthropic import serving
from veri.proxy.anthropic.converter import to_chat_turn
from veri.proxy.anthropic.protocol import MessagesRequest
from veri.proxy.deps import RolloutCall, json_response, rollout_call, served_model

router = APIRouter(prefix="/r/{rollout_id}/v1")


@router.post("/messages")
async def messages(rollout_id: str, request: Request):
    call = await rollout_call(request, rollout_id, MessagesRequest)
    parsed = call.parsed
    response = await _messages_response(call, served_model(request))
    if parsed.stream:
        return StreamingResponse(serving.messages_stream(response), media_type="text/event-stream")
    return json_response(response)


async def _messages_response(call: RolloutCall[MessagesRequest], model: str) -> dict[str, Any]:
    """The recorded response: a retry's earlier one, or a new call's, sampled and recorded here."""
    if (answered := await call.capture.answered_retry(call.session, call.identity)) is not None:
        return answered.response
    sample = await call.capture.sample(
        call.session, to_chat_turn(call.parsed), path="/v1/messages", protocol=Protocol.ANTHROPIC_MESSAGES,
        raw_request=call.body, tool_id_prefix="toolu_", identity=call.identity,
    )
    response = serving.messages_response(sample, model)
    call.capture.record(sample, response)
    return response


@router.post("/messages/count_tokens")
async def count_tokens(rollout_id: str, request: Request):
    call = await rollout_call(request, rollout_id, MessagesRequest)
    turn = to_chat_turn(call.parsed)
    return {"input_tokens": call.capture.rendering.count_tokens(turn.messages, turn.tools)}
