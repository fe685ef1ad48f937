"""A policy server that answers with a recording's completions (`veri replay policy`).

It speaks the proxy's side of the policy API (core/policy_api.py). Each call gets the first recorded
completion not yet served whose prompt ids equal the call's; when none does (the rendering changed),
the next one in recorded order, so the replay goes on and the diff shows where the prompts part.
When every completion has been served, the next call starts the recording over (a second replay).
"""

from __future__ import annotations

import threading
import time

from fastapi import FastAPI
from fastapi.responses import JSONResponse

from veri.core.policy_api import CompletionLogprobs, CompletionRequest, CompletionResponse, CompletionUsage
from veri.core.records import Span
from veri.tools.replay.recording import Recording


class RecordedCompletions:
    def __init__(self, spans: list[Span]):
        self.spans = spans
        self._served = [False] * len(spans)
        self._lock = threading.Lock()

    def next_for(self, prompt_ids: list[int]) -> Span | None:
        with self._lock:
            if self.spans and all(self._served):
                self._served = [False] * len(self.spans)
            unserved = [index for index, served in enumerate(self._served) if not served]
            same_prompt = [index for index in unserved if self.spans[index].prompt_token_ids == prompt_ids]
            chosen = (same_prompt or unserved or [None])[0]
            if chosen is None:
                return None
            self._served[chosen] = True
            return self.spans[chosen]


def completion_response(span: Span, prompt_ids: list[int], model: str) -> CompletionResponse:
    ids = span.completion_token_ids
    logprobs = None if span.logprobs_absent else CompletionLogprobs(
        tokens=[f"token_id:{token}" for token in ids], token_logprobs=list(span.completion_logprobs))
    return CompletionResponse.model_validate({
        "id": f"replay-{span.request_index}", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "text": "", "token_ids": ids, "logprobs": logprobs,
                     "finish_reason": span.finish_reason}],
        "usage": CompletionUsage(prompt_tokens=len(prompt_ids), completion_tokens=len(ids),
                                 total_tokens=len(prompt_ids) + len(ids)),
        "policy_version": span.policy_version,
    })


def create_app(recording: Recording) -> FastAPI:
    completions = RecordedCompletions(recording.spans)
    app = FastAPI(title=f"veri replay policy: {recording.name}")

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/completions")
    async def complete(request: CompletionRequest):
        prompt = request.prompt
        if not (isinstance(prompt, list) and all(isinstance(token, int) for token in prompt)):
            return JSONResponse({"error": {"message": "the replay policy takes one prompt of token ids"}}, 400)
        span = completions.next_for(list(prompt))
        if span is None:
            return JSONResponse({"error": {"message": f"recording {recording.name!r} has no completions"}}, 400)
        return completion_response(span, list(prompt), request.model or "replay").model_dump(exclude_none=True)

    return app
