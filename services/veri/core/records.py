"""Records every veri service shares: spans, sessions, policy replicas. The one place these shapes are defined.

A *span* is one model call a harness made through the capture proxy. It is written durably
before the response goes back to the harness, so nothing the policy sampled is ever lost.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from veri.core.ids import RolloutId


class PromptSource(StrEnum):
    """How the proxy built a span's prompt ids."""

    BRIDGED = "bridged"  # exact earlier prompt + completion ids, then the new turns' tokens
    FULL_RENDER = "full_render"  # the whole conversation rendered afresh (first turn, or no bridge)


class TokenFidelity(StrEnum):
    CAPTURED = "captured"  # prompt and completion ids are exactly what the policy saw / sampled
    ABSENT = "absent"  # ids are missing: the span cannot be trained on


class Protocol(StrEnum):
    OPENAI_CHAT = "openai.chat.completions"
    OPENAI_COMPLETIONS = "openai.completions"
    ANTHROPIC_MESSAGES = "anthropic.messages"
    OPENAI_RESPONSES = "openai.responses"


class HostedTools(StrEnum):
    """What the proxy does with a request's hosted tools (a provider runs them: Responses `web_search`,
    `file_search`, ...; Anthropic server tools): the policy cannot run them, only write function calls."""

    DROP = "drop"  # left out of the rendered prompt; the span names them (hosted_tools_dropped)
    REFUSE = "refuse"  # the request is refused with 400, naming them


class ToolCallFailure(StrEnum):
    """Why a tool call the policy wrote did not reach the harness as a clean call."""

    INVALID_JSON = "invalid_json"  # the call's body is not JSON
    TRUNCATED = "truncated"  # the call was still open when the completion ended (max_tokens, a stop)
    MISSING_NAME = "missing_name"  # JSON, but no function name
    MALFORMED = "malformed"  # a shape the format does not allow, or arguments that are not an object
    UNKNOWN_TOOL = "unknown_tool"  # a name the request's tools do not have


class ToolCallParseFailure(BaseModel):
    """One tool call in a completion that the renderer could not turn into a call for the harness."""

    model_config = ConfigDict(extra="forbid")

    kind: ToolCallFailure
    name: str | None = Field(default=None, description="the function name, when one could be read")
    raw: str = Field(description="the call as the policy wrote it (cut to RAW_LIMIT characters)")
    sent_as: Literal["text", "tool_call"] = Field(
        description="what the harness got: the written text in the reply's content, or (unknown_tool) the call"
    )

    RAW_LIMIT: ClassVar[int] = 2000


class Span(BaseModel):
    """One model call, exactly as sampled."""

    model_config = ConfigDict(extra="forbid")

    rollout_id: str
    request_index: int = Field(description="0-based order of this call within its rollout")
    path: str = Field(description="the route the harness called, e.g. /v1/chat/completions")
    protocol: Protocol
    request: dict[str, Any] = Field(description="the client's body, unknown fields included")
    response: dict[str, Any] = Field(description="the full (non-streamed) response in the client's protocol")
    messages: list[dict[str, Any]] = Field(
        default_factory=list, description="the conversation as rendered (OpenAI-style messages)"
    )
    tools: list[dict[str, Any]] | None = None
    hosted_tools_dropped: list[str] = Field(
        default_factory=list, description="hosted tools the request named (their types, e.g. web_search) that were"
        " left out of the rendered prompt: the policy cannot run them (hosted_tools: drop)",
    )
    reply_message: dict[str, Any] = Field(
        default_factory=dict, description="the policy's reply as an OpenAI-style assistant message"
    )
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    completion_logprobs: list[float] = Field(description="one per completion token; [] when logprobs_absent")
    logprobs_absent: bool = Field(
        default=False, description="the policy returned no logprobs (or a null among them): not trainable"
    )
    finish_reason: str = Field(description="the policy's finish reason as sent: stop | length | repetition")
    stop_sequence: str | None = Field(
        default=None, description="the client's stop sequence that ended the reply: the completion ids were cut"
        " just after it (the reply is finished, whatever the policy's finish_reason)",
    )
    policy_version: int
    policy_version_end: int | None = Field(
        default=None, description="the version announced when the call ended, when the weights were updated while"
        " it was sampled (its tokens may come from both, or only from the newer where the request was held before"
        " its first token; policy_version, the older, bounds its staleness)",
    )
    replica: int | None = Field(
        default=None, description="index of the policy replica that served it (GET /control/replicas)"
    )
    cached_prompt_tokens: int | None = Field(
        default=None, description="prompt tokens the policy served from its prefix cache (None: not reported)"
    )
    prompt_source: PromptSource
    prompt_source_reason: str = Field(description="why this prompt source was used")
    bridged_from: int | None = Field(
        default=None, description="request_index of the span whose prompt+completion this prompt extends"
    )
    token_fidelity: TokenFidelity
    sampling: dict[str, Any] = Field(description="the sampling parameters actually sent to the policy")
    started_at: float = Field(description="unix time the request arrived")
    duration_s: float
    tool_call_failures: list[ToolCallParseFailure] = Field(
        default_factory=list, description="tool calls in the completion the renderer could not parse"
    )
    client_retry_count: int | None = Field(
        default=None, description="the retry count the client sent with the sampled request"
        " (x-stainless-retry-count): > 0 after earlier attempts that left no span (a 503, a dropped connection)",
    )
    retried_at: list[float] = Field(
        default_factory=list, description="unix times the client re-sent this same request (its timeout, a lost"
        " reply) and was answered from this span: no second sample, no second branch",
    )


class SessionStatus(StrEnum):
    OPEN = "open"
    CLOSED = "closed"


class SessionCreate(BaseModel):
    """Body of POST /control/sessions (all optional)."""

    model_config = ConfigDict(extra="forbid")

    rollout_id: RolloutId | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    record_requests: bool = Field(
        default=False, description="keep the harness's requests as sent (for `veri replay record`)"
    )


class RecordedRequest(BaseModel):
    """One harness request to a rollout route, as sent (`veri replay`): the proxy keeps these for a
    session opened with `record_requests` (or a proxy run with --record-requests)."""

    seq: int = Field(description="0-based arrival order within the rollout")
    method: str
    path: str = Field(description="the route below /r/<rollout_id>, e.g. /v1/messages")
    query: str = Field(default="", description="the query string as sent, without '?'")
    headers: dict[str, str] = Field(description="the request's headers minus its key and hop-by-hop headers")
    auth: str | None = Field(description="how the key came: 'bearer' (Authorization), 'x-api-key', or None")
    body: str = Field(description="the body bytes as UTF-8 text")
    status: int | None = Field(default=None, description="the status the proxy answered (None: no answer sent)")
    received_at: float
    answered_at: float | None = Field(
        default=None, description="when the answer started; calls made at once are replayed in this order"
    )


class CaptureConfig(BaseModel):
    """What a proxy's spans depend on besides the traffic (`GET /control/config`): replaying a
    recording needs the same renderer, template settings, sampling caps and tokenizer."""

    renderer: str
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)
    thinking_retention: str | None = None
    temperature: float
    top_p: float
    max_tokens: int
    model_fingerprint: str = Field(description="sha256 over the model folder's tokenizer and chat template files")


class SessionInfo(BaseModel):
    """What the trainer (or `veri session open`) gets back for a new rollout session."""

    rollout_id: str
    api_key: str
    openai_base_url: str
    anthropic_base_url: str
    status: SessionStatus = SessionStatus.OPEN
    metadata: dict[str, Any] = Field(default_factory=dict)


class ReplicaStats(BaseModel):
    """One policy replica as the proxy sees it (GET /control/replicas)."""

    replica: int = Field(description="the index spans record")
    url: str
    rank: int | None = Field(
        description="vLLM data-parallel rank it pins (X-data-parallel-rank); None: the server's only engine"
    )
    sessions: int = Field(description="sessions pinned to it, open or closed")
    open_sessions: int
    requests: int = Field(description="model calls it answered that became spans")
    failed_requests: int = Field(description="calls it failed: unreachable, an error status, aborted (no span)")
    prompt_tokens: int
    cached_prompt_tokens: int | None = Field(
        description="prefix-cache hits over the calls that reported them (None: none did; vLLM reports them"
        " with --enable-prompt-tokens-details)"
    )
    hit_rate: float | None = Field(description="cached / prompt tokens over the calls that reported cached tokens")
