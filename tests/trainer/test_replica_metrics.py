"""Per-replica figures in a step's metrics: calls each policy replica served, and its prefix-cache hit
rate from the cached prompt tokens vLLM reported per call."""

from __future__ import annotations

from tests.trainer.records import scored
from veri.archive import step_metrics


def _on(record, replica, cached):
    spans = [span.model_copy(update={"replica": replica, "cached_prompt_tokens": c}) for span, c in
             zip(record.spans, cached, strict=True)]
    return record.model_copy(update={"spans": spans})


def test_requests_and_hit_rate_per_replica():
    # two_turn_spans: prompts of 3 and 9 tokens; the second call reuses the first's 6 tokens
    records = [_on(scored(0, 0, 1.0), 0, [0, 6]), _on(scored(0, 1, 0.0), 1, [0, 6]), _on(scored(1, 0, 1.0), 0, [0, 3])]
    metrics = step_metrics(records, {})
    assert metrics["replica/0/requests"] == 4 and metrics["replica/1/requests"] == 2
    assert metrics["replica/0/prefix_cache_hit_rate"] == 9 / 24
    assert metrics["replica/1/prefix_cache_hit_rate"] == 6 / 12


def test_no_replica_figures_for_a_policy_that_reports_none():
    metrics = step_metrics([scored(0, 0, 1.0)], {})  # hf: one server, no replica index, no cache figures
    assert not any(key.startswith("replica/") for key in metrics)
    unreported = _on(scored(0, 0, 1.0), 0, [None, None])
    assert "replica/0/prefix_cache_hit_rate" not in step_metrics([unreported], {})
