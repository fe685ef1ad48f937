"""OpenAI Responses route under /r/{rollout_id}/v1: responses (plain and streamed)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from veri.services.proxy.answering import chat_response
from veri.services.proxy.deps import json_response, rollout_call, served_model
from veri.services.proxy.responses import serving
from veri.services.proxy.responses.converter import to_chat_turn
from veri.services.proxy.responses.previous import previous_conversation
from veri.services.proxy.responses.protocol import ResponsesRequest
from veri.services.proxy.rollout_routes import PREFIX, RESPONSES

router = APIRouter(prefix=PREFIX)


@router.post(RESPONSES.path)
async def responses(rollout_id: str, request: Request):
    call = await rollout_call(request, rollout_id, ResponsesRequest)
    parsed, model = call.parsed, served_model(request)
    # A retry's recorded response keeps its id, which is what a later previous_response_id names.
    earlier = previous_conversation(call.capture.store, call.session.rollout_id, parsed.previous_response_id)
    response = await chat_response(call, RESPONSES, to_chat_turn(parsed, earlier, call.capture.settings.hosted_tools),
                                   lambda sample: serving.response_object(sample, parsed, model))
    if parsed.stream:
        return StreamingResponse(serving.response_stream(response), media_type="text/event-stream")
    return json_response(response)
