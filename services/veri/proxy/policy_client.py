"""Calls the policy's token-in/token-out `/v1/completions` (vLLM or veri's hf backend)."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
import orjson

from veri.core.policy_api import CompletionRequest, CompletionResponse
from veri.proxy.errors import InvalidRequest, PolicyUnavailable


@dataclass(frozen=True)
class PolicyCompletion:
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # stop | length
    policy_version: int


class PolicyClient:
    def __init__(self, base_url: str, *, model: str | None, timeout_s: float):
        self.base_url = base_url
        self.model = model  # None: the policy's only served model (vLLM and hf both default to it)
        # The upstream call is never streamed: a span must hold the complete completion.
        self._http = httpx.AsyncClient(
            base_url=base_url, timeout=httpx.Timeout(timeout_s, connect=10.0), limits=httpx.Limits(max_connections=512)
        )
        self.known_version = 0  # for backends that do not report policy_version (vLLM)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def complete(
        self, prompt_ids: list[int], *, max_tokens: int, temperature: float, top_p: float, stop_token_ids: list[int]
    ) -> PolicyCompletion:
        request = CompletionRequest(
            model=self.model,
            prompt=prompt_ids,
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            stop_token_ids=stop_token_ids,
            logprobs=0,
            return_token_ids=True,
            skip_special_tokens=False,
        )
        try:
            reply = await self._http.post(
                "/v1/completions",
                content=orjson.dumps(request.model_dump(exclude_none=True)),  # stdlib json is slow on 8k ids
                headers={"content-type": "application/json"},
            )
        except httpx.HTTPError as exc:
            raise PolicyUnavailable(f"policy server at {self.base_url} unreachable ({exc!r}); is it running?") from exc
        if 400 <= reply.status_code < 500:
            # e.g. the conversation no longer fits the model's context: the harness's problem.
            raise InvalidRequest(f"the policy refused this prompt: {_error_message(reply)}")
        if reply.status_code != 200:
            raise PolicyUnavailable(f"policy server answered {reply.status_code}: {reply.text[:500]}")
        try:
            body = CompletionResponse.model_validate_json(reply.content)
        except ValueError as exc:
            raise PolicyUnavailable(f"policy server sent an unreadable completion: {exc}") from exc
        choice = body.choices[0]
        if choice.token_ids is None or choice.logprobs is None:
            raise PolicyUnavailable("policy server returned no token ids / logprobs (needs return_token_ids support)")
        version = body.policy_version if body.policy_version is not None else self.known_version
        return PolicyCompletion(choice.token_ids, choice.logprobs.token_logprobs, choice.finish_reason, version)


def _error_message(reply: httpx.Response) -> str:
    try:
        return reply.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return reply.text[:500]
