"""Run a group of rollouts on a backend, at most `max_parallel` at a time.

A rollout whose backend call blows up (a bug, docker gone) still yields a result — `failed` with
`infrastructure_error` — so one broken sandbox never takes its group's survivors down with it.
Cancelled (the trainer stopped), it returns only once every sandbox of the group is removed.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TypeVar

import structlog

from veri.core.episodes import RolloutStatus
from veri.core.launch import GroupLaunch, LaunchResult, RolloutLaunch
from veri.infra.aio import gather_to_the_end
from veri.services.launcher.backend import SandboxBackend

log = structlog.get_logger("veri.launcher")
T = TypeVar("T")


async def run_group(backend: SandboxBackend, group: GroupLaunch, output_root: Path) -> list[LaunchResult]:
    gate = asyncio.Semaphore(group.max_parallel)

    async def one(launch: RolloutLaunch) -> LaunchResult:
        async with gate:
            started = time.time()
            try:
                return await backend.run(launch, output_root / launch.rollout_id)
            except Exception as exc:  # reported as the rollout's result, never swallowed
                log.exception("sandbox backend failed", rollout_id=launch.rollout_id)
                return LaunchResult(rollout_id=launch.rollout_id, status=RolloutStatus.FAILED,
                                    infrastructure_error=f"{type(exc).__name__}: {exc}",
                                    started_at=started, duration_s=time.time() - started)

    return await gather_to_the_end([one(launch) for launch in group.launches])
