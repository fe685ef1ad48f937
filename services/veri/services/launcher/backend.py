"""What every sandbox backend provides. Backends: `docker` (gVisor/runsc, the product), `kubernetes` (one
Job per rollout under a gVisor RuntimeClass, launcher/kubernetes/) and `local` (a plain subprocess, for
development on machines without docker — never isolation).

`GatedBackend` puts one backend behind the launcher's cap on sandboxes alive at once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Protocol

from veri.core.launch import LaunchResult, RolloutLaunch


class SandboxBackend(Protocol):
    name: str  # docker | kubernetes | local

    @property
    def runtime(self) -> str | None:
        """docker: runsc (gVisor) or runc (--unsafe-runc); kubernetes: the RuntimeClass; local: None (no container)."""
        ...

    async def run(self, launch: RolloutLaunch, output_dir: Path) -> LaunchResult:
        """Run one rollout to its end (completed / failed / truncated) and collect its output
        folder into `output_dir`. Never raises for harness behaviour: that is a status."""
        ...

    async def remove_leftovers(self) -> int:
        """Remove sandboxes a crashed launcher left behind; returns how many."""
        ...

    def close(self) -> None:
        """Release what the backend holds (threads, the docker client); it runs nothing after this."""
        ...


class GatedBackend:
    """A backend behind one semaphore: at most `limit` rollouts run at once, whatever the groups."""

    def __init__(self, inner: SandboxBackend, limit: int) -> None:
        self.inner = inner
        self.name = inner.name
        self.runtime = inner.runtime
        self._gate = asyncio.Semaphore(limit)

    async def run(self, launch: RolloutLaunch, output_dir: Path) -> LaunchResult:
        async with self._gate:
            return await self.inner.run(launch, output_dir)

    async def remove_leftovers(self) -> int:
        return await self.inner.remove_leftovers()

    def close(self) -> None:
        self.inner.close()
