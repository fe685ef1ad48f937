"""`previous_response_id` -> the conversation it ended with, read from the rollout's spans.

The earlier span's messages and reply are the very messages its prefix hash was taken over, so
the continued call is bridged from that span's exact ids, as a chat client resending history is.
"""

from __future__ import annotations

from typing import Any

from veri.services.proxy.errors import InvalidRequest
from veri.services.proxy.store import SpanStore


def previous_conversation(store: SpanStore, rollout_id: str, response_id: str | None) -> list[dict[str, Any]]:
    """The earlier input and output, without its instructions (the API never carries those over)."""
    if not response_id:
        return []
    span = store.span_by_response_id(rollout_id, response_id)
    if span is None:
        raise InvalidRequest(
            f"previous_response_id {response_id!r} is not a response of this rollout: continue only responses "
            "this rollout received, or send the full input", param="previous_response_id")
    if span.request.get("store") is False:
        raise InvalidRequest(
            f"previous_response_id {response_id!r} was created with store: false, so it cannot be continued: "
            "send the full input (as with store: false) or create it with store: true", param="previous_response_id")
    messages = list(span.messages)
    if span.request.get("instructions"):
        messages = messages[1:]
    return [*messages, span.reply_message]
