"""What every sandbox backend provides. Backends: `docker` (gVisor/runsc, the product) and `local`
(a plain subprocess, for development on machines without docker — never isolation)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from veri.core.launch import LaunchResult, RolloutLaunch


class SandboxBackend(Protocol):
    name: str

    async def run(self, launch: RolloutLaunch, output_dir: Path) -> LaunchResult:
        """Run one rollout to its end (completed / failed / truncated) and collect its output
        folder into `output_dir`. Never raises for harness behaviour: that is a status."""
        ...

    async def remove_leftovers(self) -> int:
        """Remove sandboxes a crashed launcher left behind; returns how many."""
        ...
