"""OpenAI routes under /r/{rollout_id}/v1: chat completions, completions, models."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from veri.core.records import Protocol
from veri.proxy.capture import CaptureService, client_finish_reason
from veri.proxy.deps import RolloutCall, capture_service, json_response, rollout_call, served_model
from veri.proxy.errors import InvalidRequest
from veri.proxy.openai import serving
from veri.proxy.openai.protocol import ChatCompletionRequest, CompletionRequest
from veri.proxy.requests import presented_key

router = APIRouter(prefix="/r/{rollout_id}/v1")


@router.post("/chat/completions")
async def chat_completions(rollout_id: str, request: Request):
    call = await rollout_call(request, rollout_id, ChatCompletionRequest)
    parsed = call.parsed
    response = await _chat_response(call, served_model(request))
    if parsed.stream:
        include_usage = bool((parsed.stream_options or {}).get("include_usage"))
        return StreamingResponse(serving.chat_stream(response, include_usage), media_type="text/event-stream")
    return json_response(response)


async def _chat_response(call: RolloutCall[ChatCompletionRequest], model: str) -> dict[str, Any]:
    """The recorded response: a retry's earlier one, or a new call's, sampled and recorded here."""
    if (answered := await call.capture.answered_retry(call.session, call.identity)) is not None:
        return answered.response
    sample = await call.capture.sample(
        call.session, serving.to_chat_turn(call.parsed), path="/v1/chat/completions", protocol=Protocol.OPENAI_CHAT,
        raw_request=call.body, tool_id_prefix="call_", identity=call.identity,
    )
    response = serving.chat_response(sample, model)
    call.capture.record(sample, response)
    return response


@router.post("/completions")
async def completions(rollout_id: str, request: Request):
    call = await rollout_call(request, rollout_id, CompletionRequest)
    parsed, capture = call.parsed, call.capture
    if (answered := await capture.answered_retry(call.session, call.identity)) is not None:
        response = answered.response
    else:
        prompt_ids = _prompt_ids(capture, parsed.prompt)
        raw = await capture.complete_raw(call.session, prompt_ids, parsed.max_tokens, identity=call.identity)
        completion = raw.completion
        text = capture.rendering.decode(completion.token_ids)
        response = serving.completion_response(
            text, client_finish_reason(completion.finish_reason), len(prompt_ids), len(completion.token_ids),
            served_model(request),
        )
        capture.record_raw(call.session, raw, path="/v1/completions", raw_request=call.body, response=response)
    if parsed.stream:
        include_usage = bool((parsed.stream_options or {}).get("include_usage"))
        return StreamingResponse(serving.completion_stream(response, include_usage), media_type="text/event-stream")
    return json_response(response)


@router.get("/models")
async def models(rollout_id: str, request: Request):
    capture = capture_service(request)
    capture.store.authorize(rollout_id, presented_key(request))
    model = served_model(request)
    return {"object": "list", "data": [{"id": model, "object": "model", "created": 0, "owned_by": "veri"}]}


def _prompt_ids(capture: CaptureService, prompt: str | list) -> list[int]:
    if isinstance(prompt, str):
        return capture.rendering.encode(prompt)
    if prompt and all(isinstance(token, int) for token in prompt):
        return list(prompt)
    if len(prompt) == 1:  # a batch of one
        return _prompt_ids(capture, prompt[0])
    raise InvalidRequest("prompt must be one string or one list of token ids (one prompt per call)", param="prompt")
