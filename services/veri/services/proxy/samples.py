"""What a converter hands the capture path and what it hands back: a chat turn in protocol-neutral form,
and one policy call sampled but not yet recorded (chat routes: `Sample`; legacy completions: `RawSample`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from veri.core.records import Protocol, ToolCallParseFailure
from veri.services.proxy.history import RequestIdentity
from veri.services.proxy.policy_client import PolicyCompletion
from veri.services.proxy.rendering import PromptPlan
from veri.services.proxy.store import SessionRow
from veri.services.proxy.tool_calls import ToolCall


@dataclass
class ChatTurn:
    """A chat request in protocol-neutral form (OpenAI-style messages and tools)."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    parse_tools: bool = True  # False for tool_choice "none": tool-call text stays text
    stop: list[str] = field(default_factory=list)
    max_tokens: int | None = None
    hosted_tools_dropped: list[str] = field(default_factory=list)  # left out of `tools`: the policy cannot run them


@dataclass
class Sample:
    """One policy call, parsed, not yet recorded."""

    session: SessionRow
    path: str
    protocol: Protocol
    raw_request: dict[str, Any]
    turn: ChatTurn
    plan: PromptPlan
    completion: PolicyCompletion
    completion_ids: list[int]
    completion_logprobs: list[float]
    content: str
    reasoning: str | None
    tool_calls: list[ToolCall]
    finish: str  # stop | length | tool_calls | stop_sequence
    stop_sequence: str | None
    sampling: dict[str, Any]
    started_at: float
    tool_call_failures: list[ToolCallParseFailure] = field(default_factory=list)
    identity: RequestIdentity | None = None
    request_id: int | None = None  # the store's note of this request (SpanStore.begin_request)

    @property
    def prompt_tokens(self) -> int:
        return len(self.plan.prompt_ids)

    @property
    def completion_tokens(self) -> int:
        return len(self.completion_ids)

    def reply_message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.reasoning:
            message["reasoning_content"] = self.reasoning
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        return message


@dataclass
class RawSample:
    """One legacy completions call (the client's own prompt ids), sampled, not yet recorded."""

    prompt_ids: list[int]
    completion: PolicyCompletion
    sampling: dict[str, Any]
    started_at: float
    identity: RequestIdentity | None
    request_id: int | None
