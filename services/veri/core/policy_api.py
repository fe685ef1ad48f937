"""The token-in/token-out subset of vLLM's OpenAI-compatible `/v1/completions` API.

The capture proxy speaks exactly this to the policy, whichever backend serves it: `vllm serve`
on GPUs, or veri's embedded `hf` backend on CPU. Field names are vLLM's. `policy_version` is
veri's addition (the hf backend returns it; for vLLM the trainer tracks it).

What vLLM 0.31 may send back (vllm/v1/engine/__init__.py `FinishReason`, entrypoints/openai/completion/):
  - `finish_reason`: stop | length | abort (the engine aborted the request: a client disconnect,
    `pause_generation(mode="abort")` around a weight sync, a shutdown) | repetition (a repetitive
    pattern was detected and generation cut) | error (vLLM turns this into a 500 itself, never a 200);
  - `logprobs`: null when the request asked none; a `token_logprobs` entry is null where the engine
    returned no logprob for that token;
  - `usage.prompt_tokens_details.cached_tokens`: prompt tokens served from the prefix cache, only when
    the server runs with `--enable-prompt-tokens-details`.
"""

from __future__ import annotations

import time
import uuid
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class CompletionRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    prompt: list[int] | list[list[int]] | str | list[str]
    n: int = Field(default=1, ge=1)
    max_tokens: int = Field(default=16, ge=1)
    temperature: float = Field(default=1.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    stop_token_ids: list[int] | None = None
    seed: int | None = None
    logprobs: int | None = Field(default=None, ge=0)
    return_token_ids: bool = False
    skip_special_tokens: bool = True
    ignore_eos: bool = False
    return_tokens_as_token_ids: bool = False  # logprobs `tokens` / `top_logprobs` keys as "token_id:<id>"


class CompletionLogprobs(BaseModel):
    """OpenAI completions-style logprobs (vLLM fills `tokens` as `token_id:<id>` when asked)."""

    tokens: list[str] = Field(default_factory=list)
    token_logprobs: list[float | None] = Field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] | None = None
    text_offset: list[int] = Field(default_factory=list)


class CompletionChoice(BaseModel):
    index: int
    text: str
    token_ids: list[int] | None = None
    prompt_token_ids: list[int] | None = None
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = Field(description="stop | length | abort | repetition (vLLM); see the docstring")
    stop_reason: int | str | None = None


class PromptTokensDetails(BaseModel):
    model_config = ConfigDict(extra="allow")

    cached_tokens: int | None = Field(default=None, description="prompt tokens that hit the prefix cache")


class CompletionUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None


class CompletionResponse(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: CompletionUsage
    prompt_token_ids: list[int] | None = None
    policy_version: int | None = None


class UpdateWeightsRequest(BaseModel):
    """`POST /update_weights` (hf backend): a safetensors file, or a folder of them, readable by the server."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1)
    policy_version: int | None = Field(
        default=None, ge=0, description="the version these weights are (the trainer's step); default: current + 1"
    )


class ServerProcess(BaseModel):
    """The process serving the policy: an id it makes when it starts, and when that was (unix s). A policy
    server that answers another id than before has restarted: it serves its model folder's weights until
    the trainer gives it the job's again (`services/trainer/weights/served.py`). vLLM's workers answer the same
    (`services/policy/vllm/worker.py`, `veri_server_process`)."""

    id: str
    started_at: float

    @classmethod
    def new(cls) -> ServerProcess:
        return cls(id=uuid.uuid4().hex, started_at=time.time())


class PolicyVersionResponse(BaseModel):
    """`GET /policy_version`, and the answer to `POST /update_weights` (hf backend)."""

    policy_version: int
    process: ServerProcess | None = Field(default=None, description="the server's process (None: a server that"
                                          " does not say)")
