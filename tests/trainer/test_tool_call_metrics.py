"""Tool-call parse failures in a step's metrics and its console line (docs/console.md): a policy whose
tool calls degrade shows there before its reward falls. End to end through the proxy:
tests/proxy/test_tool_call_failures.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.trainer.records import scored
from tests.trainer.test_progress import FakeArchive
from veri.archive.metrics import step_metrics
from veri.core.records import ToolCallFailure, ToolCallParseFailure
from veri.core.rollout_record import RolloutRecord
from veri.services.trainer.ui.progress import StepMetricsCallback, StepProgress

CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}


def with_tool_calls(record: RolloutRecord, calls: int, failures: list[tuple[str, str]]) -> RolloutRecord:
    """The record with `calls` clean calls in its first span's reply and `failures` (kind, sent_as) on it."""
    first, *rest = record.spans
    reply = {**first.reply_message, "tool_calls": [CALL] * calls}
    recorded = [ToolCallParseFailure(kind=ToolCallFailure(kind), raw="{", sent_as=sent_as)
                for kind, sent_as in failures]
    first = first.model_copy(update={"reply_message": reply, "tool_call_failures": recorded})
    return record.model_copy(update={"spans": [first, *rest]})


def test_failures_are_counted_by_kind_with_a_rate_over_every_attempted_call():
    records = [
        with_tool_calls(scored(0, 0, 1.0), 2, []),
        # an unknown tool still reached the harness as a call: it is one of the reply's 2 calls
        with_tool_calls(scored(0, 1, 0.0), 2, [("invalid_json", "text"), ("unknown_tool", "tool_call")]),
        with_tool_calls(scored(0, 2, 0.0), 0, [("truncated", "text")]),
        scored(0, 3, 1.0),
    ]
    assert records[1].tool_call_failures == {"invalid_json": 1, "unknown_tool": 1}
    assert records[1].tool_calls_attempted == 3
    metrics = step_metrics(records, {})
    assert metrics["tool_calls/attempted"] == 2 + 3 + 1
    assert metrics["tool_calls/parse_failed"] == 3
    assert {kind: metrics[f"tool_calls/parse_failed/{kind.value}"] for kind in ToolCallFailure} == {
        ToolCallFailure.INVALID_JSON: 1, ToolCallFailure.TRUNCATED: 1, ToolCallFailure.MISSING_NAME: 0,
        ToolCallFailure.MALFORMED: 0, ToolCallFailure.UNKNOWN_TOOL: 1,
    }
    assert metrics["tool_calls/parse_failure_rate"] == pytest.approx(3 / 6)
    assert metrics["rollouts/with_parse_failures"] == 2


def test_a_step_without_tool_calls_has_no_rate_and_its_line_no_mention():
    archive = FakeArchive()
    progress = StepProgress(archive)
    progress.begin(0, [scored(0, 0, 1.0)], {}, {})
    StepMetricsCallback(progress).on_step_end(None, None, SimpleNamespace(should_log=False))
    [(_, metrics)] = archive.metrics
    assert metrics["tool_calls/attempted"] == 0 and "tool_calls/parse_failure_rate" not in metrics
    assert "tool calls" not in archive.lines[0]


def test_the_step_line_names_unparsed_tool_calls():
    archive = FakeArchive()
    progress = StepProgress(archive)
    records = [with_tool_calls(scored(0, 0, 1.0), 1, [("invalid_json", "text"), ("missing_name", "text")])]
    progress.begin(0, records, {}, {})
    StepMetricsCallback(progress).on_step_end(None, None, SimpleNamespace(should_log=False))
    assert archive.lines == ["step 0: 1/1 rollouts trainable, reward mean 1, tool calls unparsed 2/3"]
