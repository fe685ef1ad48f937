"""The console's settings: where the stack's state (and so the job folders) is."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8300


@dataclass(frozen=True)
class ConsoleSettings:
    state_dir: Path  # the stack's state folder; jobs are <state_dir>/jobs/<name>/
    log_poll_s: float = 0.5  # how often a live log stream looks for new lines
    allowed_hosts: tuple[str, ...] = ()  # Host names answered besides loopback (services/console/guard.py)
    token: str | None = None  # when set, every request but /health must bear it (services/console/guard.py)

    @property
    def jobs_dir(self) -> Path:
        return self.state_dir / "jobs"
