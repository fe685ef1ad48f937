"""How the span store keeps a span: long strings once (`texts`), a bridged prompt by reference to the
span it extends. What comes back must be the span that went in, and rows an older proxy wrote load."""

from __future__ import annotations

import sqlite3
from array import array
from pathlib import Path

from testkit.spans import make_span
from veri.services.proxy.long_texts import LONG_TEXT
from veri.services.proxy.store import MAX_PROMPT_DEPTH, SharedIds, SpanStore

SYSTEM = "You are a careful agent. " * 200  # 5,000 characters, the same in every call and rollout


def conversation_span(index: int, prompt: list[int], completion: list[int], turn_texts: list[str]):
    messages = [{"role": "system", "content": SYSTEM}, *({"role": "user", "content": text} for text in turn_texts)]
    span = make_span(index, prompt, completion, messages=messages, bridged_from=index - 1 if index else None)
    span.request = {"model": "m", "messages": messages, "metadata": {"long": "x" * LONG_TEXT}}
    span.response = {"id": f"resp-{index}", "choices": [{"message": {"content": "y" * 3000}}]}
    return span


def test_long_strings_are_stored_once_and_come_back(tmp_path: Path):
    store = SpanStore(tmp_path)
    written = []
    for rollout in ("r-1", "r-2"):
        store.open_session(rollout, {})
        span = conversation_span(0, [1, 2, 3], [4], ["task " * 300])
        span.rollout_id = rollout
        store.add_span(span, prefix_hash="h", n_messages=2)
        written.append(span)
    for span in written:
        assert store.spans(span.rollout_id) == [span]
    db = sqlite3.connect(tmp_path / "spans.sqlite")
    # SYSTEM, the task, the request's long metadata and the reply: each once, whoever carried it.
    assert db.execute("SELECT COUNT(*) FROM texts").fetchone()[0] == 4
    [(json,)] = db.execute("SELECT span FROM spans WHERE rollout_id = 'r-1'").fetchall()
    assert SYSTEM not in json and len(json) < 2000
    assert store.span_by_response_id("r-1", "resp-0") == written[0]
    assert store.latest_span_messages("r-1") == (0, [*written[0].messages, written[0].reply_message])
    store.close()


def test_a_bridged_prompt_is_rebuilt_exactly_from_the_spans_it_extends(tmp_path: Path):
    store = SpanStore(tmp_path)
    store.open_session("r-1", {})
    written: list = []
    for index in range(2 * MAX_PROMPT_DEPTH + 3):
        shared = None
        if not index:
            prompt = list(range(100, 600))
        else:
            previous = written[-1]
            # Every third turn the renderer cut the completion at its turn's close: the prompt is shared alone.
            kept = [] if index % 3 == 0 else previous.completion_token_ids
            prompt = [*previous.prompt_token_ids, *kept, 40 + index, 41]
            shared = SharedIds(index - 1, len(previous.prompt_token_ids) + len(kept))
        span = conversation_span(index, prompt, [50 + index, 9], [f"turn {index}"])
        store.add_span(span, prefix_hash=f"h{index}", n_messages=2, shared=shared)
        written.append(span)
    assert store.spans("r-1") == written
    prior = store.find_prior_turn("r-1", [f"h{len(written) - 1}"])
    assert prior is not None
    assert (prior.prompt_ids, prior.completion_ids) == (written[-1].prompt_token_ids,
                                                        written[-1].completion_token_ids)
    db = sqlite3.connect(tmp_path / "spans.sqlite")
    depths = [depth for (depth,) in db.execute("SELECT prompt_depth FROM spans ORDER BY request_index")]
    assert max(depths) == MAX_PROMPT_DEPTH and depths.count(0) == 3  # the whole prompt again past the cap
    assert store.add_retry("r-1", 5, 1.0) == written[5].model_copy(update={"retried_at": [1.0]})
    store.close()


def test_spans_an_older_proxy_wrote_still_load(tmp_path: Path):
    old = SpanStore(tmp_path)  # the current schema; its rows written the way the last release did
    old.open_session("r-1", {})
    old.close()
    span = conversation_span(0, [1, 2, 3], [4], ["task"])
    span.request_index = 0
    db = sqlite3.connect(tmp_path / "spans.sqlite")
    db.execute("INSERT INTO spans (rollout_id, request_index, span, prefix_hash, n_messages, prompt_ids,"
               " completion_ids) VALUES (?, ?, ?, ?, ?, ?, ?)",
               ("r-1", 0, span.model_dump_json(exclude={"prompt_token_ids", "completion_token_ids"}), "h", 2,
                array("i", [1, 2, 3]).tobytes(), array("i", [4]).tobytes()))
    db.commit()
    store = SpanStore(tmp_path)
    assert store.spans("r-1") == [span]
    later = conversation_span(1, [1, 2, 3, 4, 5], [6], ["task", "more"])
    store.add_span(later, prefix_hash="h1", n_messages=3, shared=SharedIds(0, 4))
    assert store.spans("r-1") == [span, later]
    store.close()
