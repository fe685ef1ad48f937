"""`/v1/completions` for the hf backend: request -> rows -> batcher -> `CompletionResponse`.

Field names and behaviour follow vLLM's OpenAI-compatible server, restricted to what the capture
proxy needs (token ids in, token ids and logprobs out). Notes on matching vLLM:

- `n` choices of prompt i are choices `i*n .. i*n+n-1`; with a `seed`, choice j samples with `seed + j`
  (vLLM seeds its child requests that way), so a seeded request is reproducible whatever else is batched.
- Stop ids: `stop_token_ids` + the tokenizer's eos + the generation config's eos ids (none of the eos
  ids with `ignore_eos`). The stop token is the last entry of `token_ids`; `stop_reason` is None for the
  tokenizer's eos and the token id otherwise.
- `logprobs`: see `sampler.py` for the number; `top_logprobs` holds the sampled token then the top k,
  keyed by decoded token text (or "token_id:<id>" with `return_tokens_as_token_ids`).
- Parameters that would change sampling but are not implemented (`stop` strings, penalties, top_k, ...)
  are refused with 400 rather than silently ignored; other unknown fields are logged and ignored.
"""

from __future__ import annotations

import secrets
import time
import uuid
from collections.abc import Callable
from typing import Any

import structlog
import torch

from veri.core.policy_api import (
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    CompletionResponse,
    CompletionUsage,
)
from veri.services.policy.hf.batcher import Batcher, Generation
from veri.services.policy.hf.engine import Row
from veri.services.policy.hf.errors import InvalidRequest, ModelNotFound
from veri.services.policy.hf.loader import LoadedModel
from veri.services.policy.hf.sampler import RowSampling
from veri.services.policy.hf.scripted import ScriptedReplies

log = structlog.get_logger(__name__)

_LOGPROB_FLOOR = -9999.0  # vLLM clamps -inf to this so the JSON stays valid

# vLLM parameters this backend does not implement, and the values that mean "off".
_UNSUPPORTED: dict[str, Callable[[Any], bool]] = {
    "stream": lambda v: v in (None, False),
    "echo": lambda v: v in (None, False),
    "stop": lambda v: v in (None, "", []),
    "suffix": lambda v: v is None,
    "best_of": lambda v: v in (None, 1),
    "top_k": lambda v: v in (None, 0, -1),
    "min_p": lambda v: v in (None, 0),
    "min_tokens": lambda v: v in (None, 0),
    "presence_penalty": lambda v: v in (None, 0),
    "frequency_penalty": lambda v: v in (None, 0),
    "repetition_penalty": lambda v: v in (None, 1),
    "logit_bias": lambda v: not v,
    "prompt_logprobs": lambda v: v is None,
}


class CompletionServing:
    def __init__(
        self,
        model: LoadedModel,
        batcher: Batcher,
        *,
        max_batch_rows: int,
        max_logprobs: int,
        scripted: ScriptedReplies | None = None,
    ) -> None:
        self.model = model
        self.batcher = batcher
        self.max_batch_rows = max_batch_rows
        self.max_logprobs = max_logprobs
        self.scripted = scripted

    async def create_completion(self, request: CompletionRequest) -> CompletionResponse:
        self._check_parameters(request)
        prompts = self._prompts(request)
        self._check_sizes(request, prompts)
        rows = [self._row(request, prompt, choice) for prompt in prompts for choice in range(request.n)]
        generation = await self.batcher.generate(rows)
        return self._response(request, prompts, generation)

    # --- request -> rows -----------------------------------------------------------------------
    def _check_parameters(self, request: CompletionRequest) -> None:
        if request.model is not None and request.model != self.model.name:
            raise ModelNotFound(f"The model `{request.model}` does not exist.", param="model")
        extra = request.model_extra or {}
        for name, is_off in _UNSUPPORTED.items():
            if name in extra and not is_off(extra[name]):
                raise InvalidRequest(f"`{name}` is not supported by the hf policy backend", param=name)
        ignored = sorted(set(extra) - set(_UNSUPPORTED))
        if ignored:
            log.warning("ignored request fields", fields=ignored)
        if request.logprobs is not None and request.logprobs > self.max_logprobs:
            raise InvalidRequest(
                f"Requested sample logprobs of {request.logprobs}, which is greater than max allowed: "
                f"{self.max_logprobs}",
                param="logprobs",
            )

    def _prompts(self, request: CompletionRequest) -> list[list[int]]:
        prompt = request.prompt
        if isinstance(prompt, str) or (prompt and all(isinstance(p, str) for p in prompt)):
            texts = [prompt] if isinstance(prompt, str) else prompt
            prompts = [self.model.tokenizer(text).input_ids for text in texts]
        elif prompt and all(isinstance(p, int) for p in prompt):
            prompts = [list(prompt)]
        else:
            prompts = [list(p) for p in prompt]
        if not prompts or any(len(p) == 0 for p in prompts):
            raise InvalidRequest("prompt must not be empty", param="prompt")
        for p in prompts:
            bad = [t for t in p if not 0 <= t < self.model.vocab_size]
            if bad:
                raise InvalidRequest(
                    f"prompt token ids must be in [0, {self.model.vocab_size}); got {bad[:5]}", param="prompt"
                )
        return prompts

    def _check_sizes(self, request: CompletionRequest, prompts: list[list[int]]) -> None:
        limit = self.model.max_model_len
        for p in prompts:
            if len(p) + request.max_tokens > limit:
                raise InvalidRequest(
                    f"This model's maximum context length is {limit} tokens. However, you requested "
                    f"{len(p) + request.max_tokens} tokens ({len(p)} in the prompt, {request.max_tokens} in the "
                    f"completion). Please reduce the prompt length or max_tokens.",
                    param="max_tokens",
                )
        if len(prompts) * request.n > self.max_batch_rows:
            raise InvalidRequest(
                f"{len(prompts)} prompts x n={request.n} = {len(prompts) * request.n} completions; this server "
                f"decodes at most {self.max_batch_rows} at once (--max-batch-rows)",
                param="n",
            )

    def _row(self, request: CompletionRequest, prompt: list[int], choice: int) -> Row:
        seed = request.seed + choice if request.seed is not None else secrets.randbits(63)
        stop_ids = set(request.stop_token_ids or [])
        if not request.ignore_eos:
            stop_ids |= self.model.generation_eos_ids
            if self.model.eos_token_id is not None:
                stop_ids.add(self.model.eos_token_id)
        return Row(
            prompt=prompt,
            sampling=RowSampling(
                temperature=request.temperature,
                top_p=request.top_p,
                generator=torch.Generator().manual_seed(seed),
                num_logprobs=request.logprobs,
            ),
            max_tokens=request.max_tokens,
            stop_ids=frozenset(stop_ids),
            forced=self.scripted.forced_reply(prompt) if self.scripted is not None else None,
        )

    # --- rows -> response ----------------------------------------------------------------------
    def _response(
        self, request: CompletionRequest, prompts: list[list[int]], generation: Generation
    ) -> CompletionResponse:
        choices = [self._choice(request, index, row) for index, row in enumerate(generation.rows)]
        completion_tokens = sum(len(row.token_ids) for row in generation.rows)
        prompt_tokens = sum(len(p) for p in prompts)
        return CompletionResponse(
            id=f"cmpl-{uuid.uuid4().hex}",
            created=int(time.time()),
            model=self.model.name,
            choices=choices,
            usage=CompletionUsage(
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                total_tokens=prompt_tokens + completion_tokens,
            ),
            policy_version=generation.policy_version,
        )

    def _choice(self, request: CompletionRequest, index: int, row: Row) -> CompletionChoice:
        return CompletionChoice(
            index=index,
            text=self.model.tokenizer.decode(row.token_ids, skip_special_tokens=request.skip_special_tokens),
            token_ids=row.token_ids if request.return_token_ids else None,
            prompt_token_ids=row.prompt if request.return_token_ids else None,
            logprobs=self._logprobs(request, row) if request.logprobs is not None else None,
            finish_reason=row.finish_reason,
            stop_reason=self._stop_reason(request, row),
        )

    def _stop_reason(self, request: CompletionRequest, row: Row) -> int | None:
        last = row.token_ids[-1]
        if row.finish_reason != "stop" or (not request.ignore_eos and last == self.model.eos_token_id):
            return None
        return last

    def _logprobs(self, request: CompletionRequest, row: Row) -> CompletionLogprobs:
        label = self._token_labels(request.return_tokens_as_token_ids)
        tokens = label(row.token_ids)
        offsets, offset = [], 0
        for token in tokens:
            offsets.append(offset)
            offset += len(token)
        top_logprobs = []
        for entries in row.top_logprobs:
            keys = label([token_id for token_id, _ in entries])
            top_logprobs.append({k: max(lp, _LOGPROB_FLOOR) for k, (_, lp) in zip(keys, entries, strict=True)})
        return CompletionLogprobs(
            tokens=tokens,
            token_logprobs=[max(lp, _LOGPROB_FLOOR) for lp in row.logprobs],
            top_logprobs=top_logprobs,
            text_offset=offsets,
        )

    def _token_labels(self, as_ids: bool) -> Callable[[list[int]], list[str]]:
        if as_ids:
            return lambda ids: [f"token_id:{i}" for i in ids]
        return lambda ids: self.model.tokenizer.batch_decode([[i] for i in ids])
