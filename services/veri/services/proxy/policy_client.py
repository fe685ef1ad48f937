"""Calls the policy's token-in/token-out `/v1/completions` (vLLM or veri's hf backend).

aiohttp rather than httpx on this one hot path: posting an 8k-token prompt costs ~0.2 ms of CPU
with aiohttp against ~1.6 ms with httpx (measured on the 2-core dev box), and every model call of
every rollout goes through here.

What the policy sends back is recorded as sent, except the replies no span may hold: a completion
vLLM aborted (`finish_reason` "abort": a weight sync or a shutdown cut it short) and an "error"
finish are `PolicyAborted` / `PolicyUnavailable` (503, so the harness's SDK retries the call), and a
reply without token ids is `PolicyUnavailable`. Missing logprobs are recorded (`logprobs_absent`):
the harness gets its answer and the episode rules reject the rollout (`logprobs_absent`).

With `return_token_ids` vLLM and the hf backend echo the prompt ids: 8k of them for an 8k prompt.
The echo must be the ids sent (a server that re-tokenized or cut the prompt is `PolicyUnavailable`);
where it is byte for byte the JSON the proxy sent, it is compared as bytes and never parsed, which
halves the cost of reading a long prompt's reply.
"""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp
import orjson
import structlog

from veri.core import sampling
from veri.core.policy_api import CompletionRequest, CompletionResponse
from veri.services.proxy.errors import InvalidRequest, PolicyAborted, PolicyUnavailable

log = structlog.get_logger("veri.proxy")

# vLLM's OpenAI server pins a request to one engine of `--data-parallel-size D` with this header
# (vllm/entrypoints/generate/base/serving.py `_get_data_parallel_rank`, 0.31; out of range is a 400).
DATA_PARALLEL_RANK_HEADER = "X-data-parallel-rank"
# Below uvicorn's `timeout_keep_alive` (5 s, vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE default too).
KEEPALIVE_S = 4.0


@dataclass(frozen=True)
class PolicyCompletion:
    token_ids: list[int]
    logprobs: list[float]  # [] when logprobs_absent
    finish_reason: str  # as the policy sent it: stop | length | repetition (abort and error are raised)
    policy_version: int | None  # None: the backend does not report it (vLLM); the trainer sets it
    logprobs_absent: bool = False  # the reply had no logprobs, or a null among them
    # Prompt tokens served from the prefix cache; None: not reported (vLLM: --enable-prompt-tokens-details).
    cached_prompt_tokens: int | None = None
    policy_version_end: int | None = None  # vLLM: the announced version when the call ended, if it changed


class PolicyClient:
    def __init__(self, base_url: str, *, model: str | None, timeout_s: float):
        self.base_url = base_url
        self.model = model  # None: the policy's only served model (vLLM and hf both default to it)
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, connect=10.0)
        self._http: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        # Idle connections are dropped before the server drops them: uvicorn (vLLM, the hf backend) closes
        # one after 5 s, and aiohttp's 15 s default reused it, a 503 for calls after a pause.
        self._http = aiohttp.ClientSession(
            timeout=self._timeout, connector=aiohttp.TCPConnector(limit=512, keepalive_timeout=KEEPALIVE_S)
        )

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.close()

    async def complete(
        self, prompt_ids: list[int], *, max_tokens: int, temperature: float, top_p: float,
        stop_token_ids: list[int], data_parallel_rank: int | None = None,
    ) -> PolicyCompletion:
        assert self._http is not None, "PolicyClient.start() was not awaited"
        request = CompletionRequest(  # the prompt is ours (rendered ids): serialized, not validated
            model=self.model,
            prompt=[],
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            stop_token_ids=stop_token_ids,
            logprobs=0,
            return_token_ids=True,
            skip_special_tokens=False,
            # every other sampling field at its neutral value: a server started without veri's flags
            # would take the model's generation_config.json defaults for it (core/sampling.py)
            **sampling.NEUTRAL,
        )
        prompt_json = orjson.dumps(prompt_ids)
        fields = orjson.dumps(request.model_dump(exclude_none=True, exclude={"prompt"}))
        headers = {"content-type": "application/json"}
        if data_parallel_rank is not None:
            headers[DATA_PARALLEL_RANK_HEADER] = str(data_parallel_rank)
        body = fields[:-1] + b',"prompt":' + prompt_json + b"}"
        try:
            try:
                status, payload = await self._post(body, headers)
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                # A kept-alive connection the server closed as we wrote into it (its 5 s idle close racing
                # our 4 s one on a loaded box): nothing was sampled for us, so one fresh try, not a 503.
                log.info("policy connection closed under a call: tried again", policy=self.base_url, error=repr(exc))
                status, payload = await self._post(body, headers)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise PolicyUnavailable(f"policy server at {self.base_url} unreachable ({exc!r}); is it running?") from exc
        if 400 <= status < 500:
            # e.g. the conversation no longer fits the model's context: the harness's problem.
            raise InvalidRequest(f"the policy refused this prompt: {_error_message(payload)}")
        if status != 200:
            raise PolicyUnavailable(f"policy server answered {status}: {payload[:500].decode(errors='replace')}")
        return self._completion(read_completion(payload, prompt_ids, prompt_json))

    async def _post(self, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        assert self._http is not None
        # The upstream call is never streamed: a span must hold the complete completion.
        async with self._http.post(f"{self.base_url}/v1/completions", data=body, headers=headers) as reply:
            return reply.status, await reply.read()

    def _completion(self, body: CompletionResponse) -> PolicyCompletion:
        choice = body.choices[0]
        if choice.finish_reason == "abort":
            raise PolicyAborted(f"the policy server at {self.base_url} aborted this call (a weight sync or a"
                                " shutdown interrupted it); nothing was recorded: retry the call")
        if choice.finish_reason in (None, "error"):
            raise PolicyUnavailable(f"the policy server at {self.base_url} finished this call with"
                                    f" {choice.finish_reason!r}, not a completion; nothing was recorded: retry")
        if choice.token_ids is None:
            raise PolicyUnavailable("policy server returned no token ids (it needs return_token_ids: vLLM or"
                                    " veri's hf backend)")
        logprobs = choice.logprobs.token_logprobs if choice.logprobs is not None else []
        absent = choice.logprobs is None or len(logprobs) != len(choice.token_ids) or None in logprobs
        if absent:
            log.warning("policy returned no logprobs: the rollout will be rejected (logprobs_absent)",
                        policy=self.base_url)
        details = body.usage.prompt_tokens_details
        return PolicyCompletion(
            token_ids=choice.token_ids, logprobs=[] if absent else logprobs, finish_reason=choice.finish_reason,
            policy_version=body.policy_version, logprobs_absent=absent,
            cached_prompt_tokens=details.cached_tokens if details is not None else None,
        )


ECHO_KEY = b'"prompt_token_ids":'


def read_completion(payload: bytes, prompt_ids: list[int], prompt_json: bytes) -> CompletionResponse:
    """The policy's reply, its prompt echoes checked against `prompt_ids` (serialized as `prompt_json`)."""
    try:
        body = CompletionResponse.model_validate_json(_without_exact_echoes(payload, prompt_json))
    except ValueError as exc:
        raise PolicyUnavailable(f"policy server sent an unreadable completion: {exc}") from exc
    # Echoes left are spelled otherwise (spaces, another serializer) or differ: compare the values.
    for echo in [body.prompt_token_ids, *(choice.prompt_token_ids for choice in body.choices)]:
        if echo is not None and echo != prompt_ids:
            at = next((i for i, (a, b) in enumerate(zip(echo, prompt_ids, strict=False)) if a != b),
                      min(len(echo), len(prompt_ids)))
            raise PolicyUnavailable(
                f"the policy server echoed other prompt ids than it was sent ({len(prompt_ids)} sent, {len(echo)}"
                f" echoed, first difference at token {at}): it re-tokenized or cut the prompt, so its completion"
                " does not continue veri's ids; nothing was recorded. Serve the model with vLLM or veri's hf backend")
    return body


def _without_exact_echoes(payload: bytes, prompt_json: bytes) -> bytes:
    """`payload` with every `"prompt_token_ids": <exactly prompt_json>` value replaced by null.

    The key can only match a key: inside a JSON string its quotes would be escaped."""
    parts, start = [], 0
    while (found := payload.find(ECHO_KEY, start)) != -1:
        value = found + len(ECHO_KEY)
        while payload[value : value + 1] in (b" ", b"\n", b"\t", b"\r"):
            value += 1
        if payload.startswith(prompt_json, value):
            parts += [payload[start:value], b"null"]
            start = value + len(prompt_json)
        else:
            parts.append(payload[start:value])
            start = value
    return b"".join([*parts, payload[start:]]) if parts else payload


def _error_message(payload: bytes) -> str:
    try:
        return orjson.loads(payload)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return payload[:500].decode(errors="replace")
