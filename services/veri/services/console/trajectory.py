"""One rollout for the trajectory page: the conversation span by span, the final answer, the verdicts with
what to do, the reward and its parts, and the harness's stdout/stderr tail (the `.log` the trainer writes
beside the rollout record: the record itself does not keep it)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from veri.archive.index import final_answer
from veri.core.records import Span
from veri.core.rollout_record import RolloutRecord
from veri.services.console.tokens import span_label

HARNESS_LOG_LIMIT = 64_000  # characters of the .log shown (its tail)


@dataclass
class SpanView:
    index: int
    label: str
    in_row: bool
    prompt_source: str
    prompt_source_reason: str
    policy_version: int
    policy_version_end: int | None  # the weights were updated while it was sampled (max_staleness >= 1)
    replica: int | None
    started_at: float
    duration_s: float
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    earlier_messages: int  # messages already shown with an earlier span
    messages: list[dict[str, Any]] = field(default_factory=list)  # the ones new in this call
    reply: dict[str, Any] = field(default_factory=dict)
    # tool calls the renderer could not parse: {kind, name, raw, sent_as}, shown with their text, never silent
    tool_call_failures: list[dict[str, Any]] = field(default_factory=list)
    client_retry_count: int | None = None  # the client's own count: earlier attempts that left no span
    resent: int = 0  # times the client re-sent this request and got this span's answer again


@dataclass
class TrajectoryView:
    record: RolloutRecord
    spans: list[SpanView]
    final_answer: str
    harness_log: str | None
    duration_s: float | None  # first call's start to last call's end


def trajectory_view(record: RolloutRecord, harness_log: str | None) -> TrajectoryView:
    spans, shown = [], 0
    for span in sorted(record.spans, key=lambda item: item.request_index):
        new = span.messages[shown:] if len(span.messages) >= shown else span.messages
        spans.append(_span_view(span, record, new, shown if new is not span.messages else 0))
        shown = len(span.messages) + 1  # the reply comes back as the next call's assistant message
    if harness_log is not None and len(harness_log) > HARNESS_LOG_LIMIT:
        harness_log = "[...]\n" + harness_log[-HARNESS_LOG_LIMIT:]
    ends = [span.started_at + span.duration_s for span in record.spans]
    duration = max(ends) - min(span.started_at for span in record.spans) if record.spans else None
    return TrajectoryView(record, spans, final_answer(record), harness_log, duration)


def message_view(message: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI-style message as the page shows it: role, text, tool calls (name, arguments), tool result id."""
    calls = [{"name": (call.get("function") or {}).get("name", "?"),
              "arguments": (call.get("function") or {}).get("arguments", "")}
             for call in message.get("tool_calls") or []]
    return {"role": str(message.get("role", "?")), "text": _text(message.get("content")), "tool_calls": calls,
            "tool_call_id": message.get("tool_call_id"), "name": message.get("name")}


def _span_view(span: Span, record: RolloutRecord, new: list[dict[str, Any]], earlier: int) -> SpanView:
    return SpanView(
        index=span.request_index, label=span_label(span), in_row=span.request_index in record.episode.chain,
        prompt_source=str(span.prompt_source), prompt_source_reason=span.prompt_source_reason,
        policy_version=span.policy_version, policy_version_end=span.policy_version_end, replica=span.replica,
        started_at=span.started_at,
        duration_s=span.duration_s, finish_reason=span.finish_reason, prompt_tokens=len(span.prompt_token_ids),
        completion_tokens=len(span.completion_token_ids), earlier_messages=earlier,
        messages=[message_view(message) for message in new], reply=message_view(span.reply_message),
        tool_call_failures=[failure.model_dump(mode="json") for failure in span.tool_call_failures],
        client_retry_count=span.client_retry_count, resent=len(span.retried_at),
    )


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [part.get("text") if isinstance(part, dict) and "text" in part else json.dumps(part)
                 for part in content]
        return "\n".join(str(part) for part in parts)
    return json.dumps(content)
