"""What the span store keeps beside SQLite so a call reads less of it: the ids of rollouts' latest
spans (per worker) and the announced policy version (a file every worker maps). Two stores on one
folder stand for two proxy workers: neither may ever answer from a stale copy."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.spans import make_span
from veri.services.proxy.store import RecentIds, SharedIds, SpanStore, _SpanIds


def test_a_version_announced_through_one_worker_is_read_by_the_other(tmp_path: Path):
    first, second = SpanStore(tmp_path), SpanStore(tmp_path)
    assert first.policy_version() == second.policy_version() == 0
    first.set_policy_version(3)
    assert second.policy_version() == 3
    second.set_policy_version(4)
    assert first.policy_version() == 4
    first.close()
    second.close()


def test_a_worker_started_later_reads_the_stored_version_not_a_stale_mirror(tmp_path: Path):
    store = SpanStore(tmp_path)
    store.set_policy_version(7)
    store.close()
    (tmp_path / "policy_version").write_bytes(b"\0" * 8)  # a mirror that says 0 (lost, or from an old proxy)
    again = SpanStore(tmp_path)
    assert again.policy_version() == 7  # the row is the durable one
    again.close()


def test_a_turn_bridges_from_the_ids_another_worker_wrote(tmp_path: Path):
    writer, reader = SpanStore(tmp_path), SpanStore(tmp_path)
    writer.open_session("r-1", {})
    writer.add_span(make_span(0, [1, 2, 3], [4, 5]), prefix_hash="h0", n_messages=2)
    prior = reader.find_prior_turn("r-1", ["h0"])
    assert prior is not None and (prior.prompt_ids, prior.completion_ids) == ([1, 2, 3], [4, 5])
    # The reader writes the next turn; the writer, whose copy is of span 0, must read span 1's ids.
    reader.add_span(make_span(1, [1, 2, 3, 4, 5, 6], [7]), prefix_hash="h1", n_messages=4,
                    shared=SharedIds(0, 5))
    prior = writer.find_prior_turn("r-1", ["h1"])
    assert prior is not None and (prior.request_index, prior.prompt_ids, prior.completion_ids) == (
        1, [1, 2, 3, 4, 5, 6], [7])
    again = writer.find_prior_turn("r-1", ["h0"])  # a branch back to an earlier span reads it, too
    assert again is not None and (again.prompt_ids, again.completion_ids) == ([1, 2, 3], [4, 5])
    writer.close()
    reader.close()


def test_the_recent_ids_stay_within_their_budget_latest_rollouts_kept():
    recent = RecentIds(budget=10)
    recent.put("r-1", _SpanIds(0, [1, 2, 3], [4], 0))
    recent.put("r-2", _SpanIds(0, [1, 2, 3], [4], 0))
    assert recent.get("r-1", 0) is not None  # r-1 is now the most recently used
    recent.put("r-3", _SpanIds(0, [1, 2, 3], [4], 0))  # 12 ids: the least recently used rollout goes
    assert recent.get("r-2", 0) is None and recent.get("r-1", 0) is not None and recent.get("r-3", 0) is not None
    recent.put("r-1", _SpanIds(2, [1], [2], 1))
    recent.put("r-1", _SpanIds(1, [1], [2], 1))  # an older span never replaces the latest
    assert recent.get("r-1", 1) is None and recent.get("r-1", 2) is not None


def test_a_foreign_mirror_file_is_refused_naming_the_fix(tmp_path: Path):
    (tmp_path / "policy_version").write_bytes(b"3")
    with pytest.raises(RuntimeError, match="remove it"):
        SpanStore(tmp_path)
