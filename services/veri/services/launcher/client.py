"""`LauncherClient`: the launcher service from the trainer — the same `run_group` as an in-process
backend runner (veri.loop.collect.runner.RolloutRunner).

Like the in-process runner it never raises for a broken sandbox, nor for an unreachable launcher: every
rollout of the group comes back `failed` with `infrastructure_error` saying what went wrong (the trainer
keeps such rollouts out of the advantages)."""

from __future__ import annotations

import time
from typing import Any

import httpx

from veri.core.episodes import RolloutStatus
from veri.core.launch import GroupLaunch, LaunchResult
from veri.infra.http import AsyncJsonClient, HttpCallError

# While the launcher (re)starts its port refuses connections: httpx's transport retries those
# (backoff 0, 0.5, 1, 2, 4, 8, 16 s: about 30 s in all), never a request the launcher received.
CONNECT_RETRIES = 7
# No read timeout: a group takes as long as its slowest rollout (each one has its own timeout).
GROUP_TIMEOUT = httpx.Timeout(connect=10, read=None, write=60, pool=None)


class LauncherClient:
    def __init__(self, base_url: str, *, token: str | None = None, subdir: str | None = None,
                 connect_retries: int = CONNECT_RETRIES) -> None:
        """`subdir`: output folders land in <launcher output_root>/<subdir>/<rollout_id>."""
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.subdir = subdir
        self.connect_retries = connect_retries

    def _client(self, timeout: httpx.Timeout | float, retries: int) -> AsyncJsonClient:
        return AsyncJsonClient(self.base_url, service="launcher", token=self.token, timeout_s=timeout,
                               retries=retries, unreachable_fix="start it first (make up), or pass --launcher-url")

    async def health(self) -> dict[str, Any]:
        async with self._client(10, 0) as client:
            return await client.call("GET", "/health")

    async def run_group(self, group: GroupLaunch) -> list[LaunchResult]:
        started = time.time()
        params = {"subdir": self.subdir} if self.subdir else None
        try:
            async with self._client(GROUP_TIMEOUT, self.connect_retries) as client:
                answer = await client.call("POST", "/v1/groups", json=group, params=params)
        except HttpCallError as error:
            return _failed(group, str(error), started)
        results = [LaunchResult.model_validate(item) for item in answer]
        by_id = {result.rollout_id: result for result in results}
        return [by_id.get(launch.rollout_id) or _failed_one(launch.rollout_id, "missing from the launcher's answer",
                                                            started) for launch in group.launches]


def _failed(group: GroupLaunch, error: str, started: float) -> list[LaunchResult]:
    return [_failed_one(launch.rollout_id, error, started) for launch in group.launches]


def _failed_one(rollout_id: str, error: str, started: float) -> LaunchResult:
    return LaunchResult(rollout_id=rollout_id, status=RolloutStatus.FAILED, infrastructure_error=error,
                        started_at=started, duration_s=time.time() - started)
