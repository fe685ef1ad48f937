"""The tool calls a completion holds, as the renderer parsed them -> the calls the harness gets, and
the ones it could not parse, named (each becomes a `ToolCallParseFailure` on the span).

A call the renderer could not parse (broken JSON, cut off by max_tokens, no name, a wrong shape)
reaches the harness as the text the policy wrote, as before; what changes is that it is counted, so
a policy whose tool use degrades shows in the step metrics before its reward does. A call to a tool
the request does not offer still reaches the harness as a call (the harness answers "no such tool",
as with any API), and is counted as `unknown_tool`.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from renderers import ToolCallParseStatus

from veri.core.records import ToolCallFailure, ToolCallParseFailure

_FAILURE_OF_STATUS = {
    ToolCallParseStatus.INVALID_JSON: ToolCallFailure.INVALID_JSON,
    ToolCallParseStatus.UNCLOSED_BLOCK: ToolCallFailure.TRUNCATED,
    ToolCallParseStatus.MISSING_NAME: ToolCallFailure.MISSING_NAME,
    ToolCallParseStatus.MALFORMED_STRUCTURE: ToolCallFailure.MALFORMED,
    ToolCallParseStatus.UNKNOWN_TOOL: ToolCallFailure.UNKNOWN_TOOL,
}


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as OpenAI sends it
    input: dict[str, Any]  # parsed, as Anthropic sends it


@dataclass
class ToolCallSplit:
    content: str
    calls: list[ToolCall] = field(default_factory=list)
    failures: list[ToolCallParseFailure] = field(default_factory=list)


def split_tool_calls(parsed: Any, tools: list[dict[str, Any]] | None, id_prefix: str) -> ToolCallSplit:
    """`parsed` is the renderer's ParsedResponse; `tools` the request's tools, None when calls must stay
    text (no tools, or tool_choice "none": nothing written there is a failed call)."""
    split = ToolCallSplit(parsed.content or "")
    offered = {tool["function"]["name"] for tool in tools or []}
    for attempt in parsed.tool_calls:
        failure = _failure(attempt) if tools is not None else None
        if tools is None or failure is not None:
            # Under tool_choice "none", or unparsed: the harness gets the text as written.
            split.content = f"{split.content}\n{attempt.raw}" if split.content else attempt.raw
            if failure is not None:
                split.failures.append(_recorded(failure, attempt, sent_as="text"))
            continue
        if attempt.name not in offered:
            split.failures.append(_recorded(ToolCallFailure.UNKNOWN_TOOL, attempt, sent_as="tool_call"))
        split.calls.append(ToolCall(
            id=f"{id_prefix}{uuid.uuid4().hex[:24]}",
            name=attempt.name or "",
            arguments=json.dumps(attempt.arguments, ensure_ascii=False),
            input=attempt.arguments,
        ))
    return split


def _failure(attempt: Any) -> ToolCallFailure | None:
    if attempt.status != ToolCallParseStatus.OK:
        return _FAILURE_OF_STATUS.get(attempt.status, ToolCallFailure.MALFORMED)
    if not isinstance(attempt.arguments, dict):
        return ToolCallFailure.MALFORMED  # e.g. "arguments": "city=Paris": not an object a tool can take
    return None


def _recorded(kind: ToolCallFailure, attempt: Any, *, sent_as: str) -> ToolCallParseFailure:
    return ToolCallParseFailure.model_validate({
        "kind": kind, "name": attempt.name, "raw": attempt.raw[: ToolCallParseFailure.RAW_LIMIT], "sent_as": sent_as,
    })
