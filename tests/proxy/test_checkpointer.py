"""The span store's WAL reaches the database file through the background checkpointer, not commits."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from veri.services.proxy.checkpointer import WalCheckpointer

ROWS = 80
ROW = b"x" * 64_000  # 80 x 64 kB: past SQLite's 4 MB autocheckpoint, had it been on


def wait_for(condition, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_checkpointer_moves_the_wal_into_the_database(tmp_path: Path) -> None:
    path = tmp_path / "spans.sqlite"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA wal_autocheckpoint=0")  # as the span store's connection
    db.execute("CREATE TABLE t (b BLOB)")
    for _ in range(ROWS):
        db.execute("INSERT INTO t VALUES (?)", (ROW,))
    assert path.stat().st_size < 1_000_000  # every row is still in the WAL: no commit checkpointed
    checkpointer = WalCheckpointer(path, interval_s=0.05)
    try:
        assert wait_for(lambda: path.stat().st_size > ROWS * len(ROW))
        db.execute("INSERT INTO t VALUES (?)", (ROW,))  # writers carry on beside it
    finally:
        checkpointer.stop()
    assert db.execute("SELECT COUNT(*) FROM t").fetchone() == (ROWS + 1,)
    db.close()
