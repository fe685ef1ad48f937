"""`LauncherClient`: the launcher service from the trainer — the same `run_group` as an in-process
backend runner (veri.trainer.rollouts.runner.RolloutRunner).

Like the in-process runner it never raises for a broken sandbox, nor for an unreachable launcher: every
rollout of the group comes back `failed` with `infrastructure_error` saying what went wrong (the trainer
keeps such rollouts out of the advantages)."""

from __future__ import annotations

import asyncio
import time

import httpx

from veri.core.episodes import RolloutStatus
from veri.core.launch import GroupLaunch, LaunchResult


class LauncherClient:
    def __init__(self, base_url: str, *, token: str | None = None, subdir: str | None = None,
                 connect_retry_s: float = 30.0) -> None:
        """`subdir`: output folders land in <launcher output_root>/<subdir>/<rollout_id>."""
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.subdir = subdir
        self.connect_retry_s = connect_retry_s

    async def health(self) -> dict:
        async with httpx.AsyncClient(timeout=10) as client:
            reply = await client.get(f"{self.base_url}/health")
            reply.raise_for_status()
            return reply.json()

    async def run_group(self, group: GroupLaunch) -> list[LaunchResult]:
        started = time.time()
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        params = {"subdir": self.subdir} if self.subdir else {}
        deadline = time.monotonic() + self.connect_retry_s
        # No read timeout: a group takes as long as its slowest rollout (each one has its own timeout).
        timeout = httpx.Timeout(connect=10, read=None, write=60, pool=None)
        async with httpx.AsyncClient(timeout=timeout) as client:
            while True:
                try:
                    reply = await client.post(f"{self.base_url}/v1/groups", content=group.model_dump_json(),
                                              params=params, headers={"content-type": "application/json", **headers})
                    break
                except httpx.ConnectError as exc:  # the launcher is (re)starting: retry for a while
                    if time.monotonic() > deadline:
                        return _failed(group, f"launcher unreachable at {self.base_url}: {exc}", started)
                    await asyncio.sleep(1.0)
                except httpx.HTTPError as exc:
                    return _failed(group, f"launcher request failed: {type(exc).__name__}: {exc}", started)
        if reply.status_code != 200:
            return _failed(group, f"launcher answered {reply.status_code}: {reply.text[:500]}", started)
        results = [LaunchResult.model_validate(item) for item in reply.json()]
        by_id = {result.rollout_id: result for result in results}
        return [by_id.get(launch.rollout_id) or _failed_one(launch.rollout_id, "missing from the launcher's answer",
                                                            started) for launch in group.launches]


def _failed(group: GroupLaunch, error: str, started: float) -> list[LaunchResult]:
    return [_failed_one(launch.rollout_id, error, started) for launch in group.launches]


def _failed_one(rollout_id: str, error: str, started: float) -> LaunchResult:
    return LaunchResult(rollout_id=rollout_id, status=RolloutStatus.FAILED, infrastructure_error=error,
                        started_at=started, duration_s=time.time() - started)
