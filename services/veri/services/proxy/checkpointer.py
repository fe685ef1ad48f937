"""Moves the span store's write-ahead log into the database off the request path.

SQLite checkpoints the WAL inside whichever commit takes it past 1000 pages (4 MB: ~35 spans of an
8k-token prompt), so one call in ~35 paid 30-50 ms of copying and fsync before its response went
out. The store's connection turns that off (`wal_autocheckpoint=0`) and this thread checkpoints
instead, PASSIVE: it never waits for a writer nor blocks one, and sqlite3 lets go of the GIL while
it copies. Commits stay as durable as before (the WAL is the durable part).
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path


class WalCheckpointer:
    def __init__(self, path: Path, *, interval_s: float = 0.5):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(path, interval_s), name="span-wal-checkpoint",
                                        daemon=True)
        self._thread.start()

    def _run(self, path: Path, interval_s: float) -> None:
        db = sqlite3.connect(path, isolation_level=None)
        try:
            while not self._stop.wait(interval_s):
                try:
                    db.execute("PRAGMA wal_checkpoint(PASSIVE)")
                except sqlite3.OperationalError:
                    pass  # another worker's checkpoint holds the lock: the next round catches up
        finally:
            db.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
