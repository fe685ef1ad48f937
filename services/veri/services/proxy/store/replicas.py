"""The `replicas` table: the proxy's policy servers and what each served (calls, prompt tokens, cache hits)."""

from __future__ import annotations

from veri.core.records import ReplicaStats, SessionStatus, Span
from veri.services.proxy.replicas import Replica
from veri.services.proxy.store.database import Tables


class ReplicaCounters(Tables):
    def set_replicas(self, replicas: list[Replica]) -> None:
        """Record the proxy's replicas; a replica whose URL or rank changed starts its counters afresh.

        Every worker calls this at startup with the same list, so it is idempotent."""
        with self._write() as db:
            rows = db.execute("SELECT replica, url, rank FROM replicas")
            known = {replica: (url, rank) for replica, url, rank in rows}
            for replica in replicas:
                if known.get(replica.index) != (replica.url, replica.rank):
                    db.execute("INSERT OR REPLACE INTO replicas (replica, url, rank) VALUES (?, ?, ?)",
                               (replica.index, replica.url, replica.rank))
            db.execute("DELETE FROM replicas WHERE replica >= ?", (len(replicas),))

    def replica_stats(self) -> list[ReplicaStats]:
        with self._lock:
            rows = self._db.execute(
                "SELECT r.replica, r.url, r.rank, r.requests, r.failed_requests, r.prompt_tokens,"
                " r.reported_prompt_tokens, r.cached_prompt_tokens, r.cache_reports,"
                " (SELECT COUNT(*) FROM sessions s WHERE s.replica = r.replica),"
                " (SELECT COUNT(*) FROM sessions s WHERE s.replica = r.replica AND s.status = ?)"
                " FROM replicas r ORDER BY r.replica",
                (SessionStatus.OPEN.value,),
            ).fetchall()
        return [
            ReplicaStats(
                replica=replica, url=url, rank=rank, sessions=sessions, open_sessions=open_sessions,
                requests=requests, failed_requests=failed, prompt_tokens=prompt_tokens,
                cached_prompt_tokens=cached if reports else None,
                hit_rate=cached / reported if reports and reported else None,
            )
            for (replica, url, rank, requests, failed, prompt_tokens, reported, cached, reports, sessions,
                 open_sessions) in rows
        ]

    def count_failed_call(self, replica: int) -> None:
        with self._lock:
            self._db.execute("UPDATE replicas SET failed_requests = failed_requests + 1 WHERE replica = ?", (replica,))

    def _count_call(self, span: Span) -> None:
        if span.replica is None:
            return
        prompt_tokens, cached = len(span.prompt_token_ids), span.cached_prompt_tokens
        reported = cached is not None
        self._db.execute(
            "UPDATE replicas SET requests = requests + 1, prompt_tokens = prompt_tokens + ?,"
            " reported_prompt_tokens = reported_prompt_tokens + ?, cached_prompt_tokens = cached_prompt_tokens + ?,"
            " cache_reports = cache_reports + ? WHERE replica = ?",
            (prompt_tokens, prompt_tokens if reported else 0, cached or 0, int(reported), span.replica),
        )
