"""OpenAI routes under /r/{rollout_id}/v1: chat completions, completions, models."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from veri.services.proxy.answering import chat_response, recorded_response
from veri.services.proxy.capture import CaptureService, client_finish_reason
from veri.services.proxy.deps import capture_service, json_response, rollout_call, served_model
from veri.services.proxy.errors import InvalidRequest
from veri.services.proxy.openai import serving
from veri.services.proxy.openai.protocol import ChatCompletionRequest, CompletionRequest
from veri.services.proxy.requests import presented_key
from veri.services.proxy.rollout_routes import CHAT_COMPLETIONS, COMPLETIONS, MODELS, PREFIX

router = APIRouter(prefix=PREFIX)


@router.post(CHAT_COMPLETIONS.path)
async def chat_completions(rollout_id: str, request: Request):
    call = await rollout_call(request, rollout_id, ChatCompletionRequest)
    parsed, model = call.parsed, served_model(request)
    response = await chat_response(call, CHAT_COMPLETIONS, serving.to_chat_turn(parsed),
                                   lambda sample: serving.chat_response(sample, model))
    if parsed.stream:
        include_usage = bool((parsed.stream_options or {}).get("include_usage"))
        return StreamingResponse(serving.chat_stream(response, include_usage), media_type="text/event-stream")
    return json_response(response)


@router.post(COMPLETIONS.path)
async def completions(rollout_id: str, request: Request):
    call = await rollout_call(request, rollout_id, CompletionRequest)
    parsed, capture, model = call.parsed, call.capture, served_model(request)
    prompt_ids = _prompt_ids(capture, parsed.prompt)

    async def answer(note: int) -> dict[str, Any]:
        raw = await capture.complete_raw(call.session, prompt_ids, parsed.max_tokens, identity=call.identity,
                                         request_id=note)
        completion = raw.completion
        text = capture.rendering.decode(completion.token_ids)
        response = serving.completion_response(
            text, client_finish_reason(completion.finish_reason), len(prompt_ids), len(completion.token_ids), model,
        )
        capture.record_raw(call.session, raw, path=COMPLETIONS.path, raw_request=call.body, response=response)
        return response

    response = await recorded_response(call, answer)
    if parsed.stream:
        include_usage = bool((parsed.stream_options or {}).get("include_usage"))
        return StreamingResponse(serving.completion_stream(response, include_usage), media_type="text/event-stream")
    return json_response(response)


@router.get(MODELS.path)
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
