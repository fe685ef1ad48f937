"""Calls the policy's token-in/token-out `/v1/completions` (vLLM or veri's hf backend).

aiohttp rather than httpx on this one hot path: posting an 8k-token prompt costs ~0.2 ms of CPU
with aiohttp against ~1.6 ms with httpx (measured on the 2-core dev box), and every model call of
every rollout goes through here.
"""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp
import orjson

from veri.core.policy_api import CompletionRequest, CompletionResponse
from veri.proxy.errors import InvalidRequest, PolicyUnavailable


@dataclass(frozen=True)
class PolicyCompletion:
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # stop | length
    policy_version: int | None  # None: the backend does not report it (vLLM); the trainer sets it


class PolicyClient:
    def __init__(self, base_url: str, *, model: str | None, timeout_s: float):
        self.base_url = base_url
        self.model = model  # None: the policy's only served model (vLLM and hf both default to it)
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, connect=10.0)
        self._http: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self._http = aiohttp.ClientSession(
            timeout=self._timeout, connector=aiohttp.TCPConnector(limit=512)
        )

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.close()

    async def complete(
        self, prompt_ids: list[int], *, max_tokens: int, temperature: float, top_p: float, stop_token_ids: list[int]
    ) -> PolicyCompletion:
        assert self._http is not None, "PolicyClient.start() was not awaited"
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
        # The upstream call is never streamed: a span must hold the complete completion.
        try:
            async with self._http.post(
                f"{self.base_url}/v1/completions",
                data=orjson.dumps(request.model_dump(exclude_none=True)),
                headers={"content-type": "application/json"},
            ) as reply:
                status, payload = reply.status, await reply.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise PolicyUnavailable(f"policy server at {self.base_url} unreachable ({exc!r}); is it running?") from exc
        if 400 <= status < 500:
            # e.g. the conversation no longer fits the model's context: the harness's problem.
            raise InvalidRequest(f"the policy refused this prompt: {_error_message(payload)}")
        if status != 200:
            raise PolicyUnavailable(f"policy server answered {status}: {payload[:500].decode(errors='replace')}")
        try:
            body = CompletionResponse.model_validate_json(payload)
        except ValueError as exc:
            raise PolicyUnavailable(f"policy server sent an unreadable completion: {exc}") from exc
        choice = body.choices[0]
        if choice.token_ids is None or choice.logprobs is None:
            raise PolicyUnavailable("policy server returned no token ids / logprobs (needs return_token_ids support)")
        return PolicyCompletion(choice.token_ids, choice.logprobs.token_logprobs, choice.finish_reason,
                                body.policy_version)


def _error_message(payload: bytes) -> str:
    try:
        return orjson.loads(payload)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return payload[:500].decode(errors="replace")
