"""The span store's replica pinning, without a server: fewest open sessions, round-robin on ties,
counters, and stores an older proxy wrote."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from veri.core.records import SessionStatus
from veri.services.proxy.replicas import Replica, plan_replicas
from veri.services.proxy.store import SpanStore


def test_plan_replicas_lists_each_servers_ranks():
    assert plan_replicas(["http://a", "http://b"], 1) == [Replica(0, "http://a", None), Replica(1, "http://b", None)]
    assert [(r.url, r.rank) for r in plan_replicas(["http://a", "http://b"], 2)] == [
        ("http://a", 0), ("http://a", 1), ("http://b", 0), ("http://b", 1)]


def test_sessions_go_to_the_fewest_open_round_robin_on_ties(tmp_path: Path):
    store = SpanStore(tmp_path)
    store.set_replicas(plan_replicas(["http://a", "http://b", "http://c"], 1))
    first = [store.open_session(None, {}).replica for _ in range(4)]
    assert first == [0, 1, 2, 0]
    closed = store.open_session(None, {})
    assert closed.replica == 1
    store.close_session(closed.rollout_id)
    # 1 and 2 have one open session each: the tie goes on round the cursor, past the replica used last.
    assert store.open_session(None, {}).replica == 2
    stats = store.replica_stats()
    assert [(s.sessions, s.open_sessions) for s in stats] == [(2, 2), (2, 1), (2, 2)]


def test_counters_survive_a_restart_and_reset_when_the_replica_changes(tmp_path: Path):
    store = SpanStore(tmp_path)
    store.set_replicas(plan_replicas(["http://a"], 2))
    store.count_failed_call(1)
    store.close()
    again = SpanStore(tmp_path)
    again.set_replicas(plan_replicas(["http://a"], 2))
    assert [s.failed_requests for s in again.replica_stats()] == [0, 1]
    again.set_replicas([Replica(0, "http://a", 0), Replica(1, "http://other", None)])
    assert [(s.url, s.failed_requests) for s in again.replica_stats()] == [("http://a", 0), ("http://other", 0)]
    again.set_replicas([Replica(0, "http://a", 0)])
    assert len(again.replica_stats()) == 1


def test_a_store_from_before_replicas_opens(tmp_path: Path):
    db = sqlite3.connect(tmp_path / "spans.sqlite")
    db.execute("CREATE TABLE sessions (rollout_id TEXT PRIMARY KEY, api_key TEXT NOT NULL, status TEXT NOT NULL,"
               " metadata TEXT NOT NULL, created_at REAL NOT NULL, closed_at REAL)")
    db.execute("INSERT INTO sessions VALUES ('r-old', 'k', 'open', '{}', 0, NULL)")
    db.commit()
    db.close()
    store = SpanStore(tmp_path)
    assert store.get_session("r-old").replica == 0 and store.get_session("r-old").status is SessionStatus.OPEN
    store.set_replicas(plan_replicas(["http://a", "http://b"], 1))
    assert store.open_session(None, {}).replica == 1  # r-old holds replica 0


def test_counting_open_sessions_reads_an_index_not_every_session(tmp_path: Path):
    # Each session open counts the open sessions per replica; a store keeps every session it ever had.
    SpanStore(tmp_path).close()
    db = sqlite3.connect(tmp_path / "spans.sqlite")
    plan = db.execute("EXPLAIN QUERY PLAN SELECT replica, COUNT(*) FROM sessions WHERE status = ? GROUP BY replica",
                      ("open",)).fetchall()
    assert any("sessions_by_status" in row[-1] for row in plan), plan
