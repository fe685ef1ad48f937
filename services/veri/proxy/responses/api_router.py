"""OpenAI Responses route under /r/{rollout_id}/v1: responses (plain and streamed)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from veri.core.records import Protocol
from veri.proxy.deps import RolloutCall, json_response, rollout_call, served_model
from veri.proxy.responses import serving
from veri.proxy.responses.converter import to_chat_turn
from veri.proxy.responses.previous import previous_conversation
from veri.proxy.responses.protocol import ResponsesRequest

router = APIRouter(prefix="/r/{rollout_id}/v1")


@router.post("/responses")
async def responses(rollout_id: str, request: Request):
    call = await rollout_call(request, rollout_id, ResponsesRequest)
    parsed = call.parsed
    response = await _response(call, served_model(request))
    if parsed.stream:
        return StreamingResponse(serving.response_stream(response), media_type="text/event-stream")
    return json_response(response)


async def _response(call: RolloutCall[ResponsesRequest], model: str) -> dict[str, Any]:
    """The recorded response: a retry's earlier one (its id is what a later previous_response_id names),
    or a new call's, sampled and recorded here."""
    if (answered := await call.capture.answered_retry(call.session, call.identity)) is not None:
        return answered.response
    parsed = call.parsed
    earlier = previous_conversation(call.capture.store, call.session.rollout_id, parsed.previous_response_id)
    sample = await call.capture.sample(
        call.session, to_chat_turn(parsed, earlier), path="/v1/responses", protocol=Protocol.OPENAI_RESPONSES,
        raw_request=call.body, tool_id_prefix="call_", identity=call.identity,
    )
    response = serving.response_object(sample, parsed, model)
    call.capture.record(sample, response)
    return response
