"""Anthropic routes under /r/{rollout_id}/v1: messages (plain and streamed), count_tokens."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from veri.services.proxy.answering import chat_response
from veri.services.proxy.anthropic import serving
from veri.services.proxy.anthropic.converter import to_chat_turn
from veri.services.proxy.anthropic.protocol import MessagesRequest
from veri.services.proxy.deps import json_response, rollout_call, served_model
from veri.services.proxy.rollout_routes import COUNT_TOKENS, MESSAGES, PREFIX

router = APIRouter(prefix=PREFIX)


@router.post(MESSAGES.path)
async def messages(rollout_id: str, request: Request):
    call = await rollout_call(request, rollout_id, MessagesRequest)
    parsed, model = call.parsed, served_model(request)
    response = await chat_response(call, MESSAGES, to_chat_turn(parsed, call.capture.settings.hosted_tools),
                                   lambda sample: serving.messages_response(sample, model))
    if parsed.stream:
        return StreamingResponse(serving.messages_stream(response), media_type="text/event-stream")
    return json_response(response)


@router.post(COUNT_TOKENS.path)
async def count_tokens(rollout_id: str, request: Request):
    call = await rollout_call(request, rollout_id, MessagesRequest)
    turn = to_chat_turn(call.parsed, call.capture.settings.hosted_tools)
    return {"input_tokens": call.capture.rendering.count_tokens(turn.messages, turn.tools)}
