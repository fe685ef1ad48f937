"""OpenAI Responses route under /r/{rollout_id}/v1: responses (plain and streamed)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from veri.core.records import Protocol
from veri.proxy.deps import json_response, rollout_call, served_model
from veri.proxy.responses import serving
from veri.proxy.responses.converter import to_chat_turn
from veri.proxy.responses.previous import previous_conversation
from veri.proxy.responses.protocol import ResponsesRequest

router = APIRouter(prefix="/r/{rollout_id}/v1")


@router.post("/responses")
async def responses(rollout_id: str, request: Request):
    call = await rollout_call(request, rollout_id, ResponsesRequest)
    parsed = call.parsed
    earlier = previous_conversation(call.capture.store, rollout_id, parsed.previous_response_id)
    sample = await call.capture.sample(
        call.session, to_chat_turn(parsed, earlier), path="/v1/responses", protocol=Protocol.OPENAI_RESPONSES,
        raw_request=call.body, tool_id_prefix="call_",
    )
    response = serving.response_object(sample, parsed, served_model(request))
    call.capture.record(sample, response)
    if parsed.stream:
        return StreamingResponse(serving.response_stream(response), media_type="text/event-stream")
    return json_response(response)
