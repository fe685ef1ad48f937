"""The launcher's HTTP API.

    POST /v1/groups[?subdir=REL]   GroupLaunch JSON -> list[LaunchResult], when every rollout has ended.
                                   Output folders: <output_root>[/REL]/<rollout_id> (the trainer reads
                                   them at the same path: share the volume, same mount point).
                                   A client that goes away first (the trainer stopped, Ctrl-C, or died)
                                   cancels the group: its sandboxes are removed at once (499).
    GET  /health                   backend, runtime, network.

Routes take what the app built once (deps.py) and build nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import PurePosixPath
from typing import Any, TypeVar

import structlog
from fastapi import APIRouter, Depends, HTTPException, Query, Request

from veri.core.launch import GroupLaunch, LaunchResult
from veri.services.launcher.deps import BackendDep, SettingsDep, require_token
from veri.services.launcher.group import run_group

T = TypeVar("T")
DISCONNECT_POLL_S = 0.5
CLIENT_CLOSED_REQUEST = 499  # nginx's code: nobody reads the answer

router = APIRouter()
log = structlog.get_logger("veri.launcher")


@router.get("/health")
async def health(settings: SettingsDep, backend: BackendDep) -> dict:
    return {"ok": True, "backend": backend.name, "runtime": backend.runtime,
            "network": settings.network if backend.name == "docker" else None,
            "output_root": str(settings.output_root.absolute()),
            "max_parallel_rollouts": settings.max_parallel_rollouts}


@router.post("/v1/groups", response_model=list[LaunchResult], dependencies=[Depends(require_token)])
async def run_groups(
    group: GroupLaunch,
    request: Request,
    settings: SettingsDep,
    backend: BackendDep,
    subdir: str | None = Query(default=None, description="relative folder under output_root for this group"),
) -> list[LaunchResult]:
    root = settings.output_root.absolute()
    if subdir:
        rel = PurePosixPath(subdir)
        if rel.is_absolute() or ".." in rel.parts:
            raise HTTPException(status_code=400, detail="subdir must be a relative path without '..'")
        root = root / rel
    ids = [launch.rollout_id for launch in group.launches]
    bad = [i for i in ids if not i or "/" in i or i in (".", "..") or i.startswith(".")]
    if bad or len(set(ids)) != len(ids):
        raise HTTPException(status_code=400, detail=f"rollout ids must be unique folder names: {bad or ids}")
    return await _while_connected(request, run_group(backend, group, root), ids)


async def _while_connected(request: Request, work: Coroutine[Any, Any, T], ids: list[str]) -> T:
    """Run `work` while the client waits for it. Starlette does not cancel a handler whose client went
    away, so ask every DISCONNECT_POLL_S; once it has gone, cancel `work`: run_group's sandboxes are
    removed, none runs on to its timeout for an answer nobody reads."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if task.done():
                return task.result()
            if await request.is_disconnected():
                log.warning("client went away mid-group: cancelling it, removing its sandboxes", rollouts=ids)
                task.cancel()
                await asyncio.wait({task})
                raise HTTPException(status_code=CLIENT_CLOSED_REQUEST, detail="the client closed the request")
    finally:
        if not task.done():  # this handler itself was cancelled (the launcher shuts down)
            task.cancel()
            await asyncio.wait({task})
