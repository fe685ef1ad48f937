"""The launcher's HTTP API.

    POST /v1/groups[?subdir=REL]   GroupLaunch JSON -> list[LaunchResult], when every rollout has ended.
                                   Output folders: <output_root>[/REL]/<rollout_id> (the trainer reads
                                   them at the same path: share the volume, same mount point).
    GET  /health                   backend, runtime, network.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from fastapi import APIRouter, Header, HTTPException, Query, Request

from veri.core.launch import GroupLaunch, LaunchResult
from veri.launcher.group import run_group

router = APIRouter()


@router.get("/health")
async def health(request: Request) -> dict:
    settings = request.app.state.settings
    backend = request.app.state.backend
    return {"ok": True, "backend": backend.name, "runtime": getattr(backend.inner, "runtime", None),
            "network": settings.network if backend.name == "docker" else None,
            "output_root": str(settings.output_root.absolute()), "max_parallel_rollouts": settings.max_parallel_rollouts}


@router.post("/v1/groups", response_model=list[LaunchResult])
async def run_groups(
    group: GroupLaunch,
    request: Request,
    subdir: str | None = Query(default=None, description="relative folder under output_root for this group"),
    authorization: str | None = Header(default=None),
) -> list[LaunchResult]:
    from veri.launcher.service import check_token

    settings = request.app.state.settings
    if not check_token(settings, authorization):
        raise HTTPException(status_code=401, detail="launcher token required (Authorization: Bearer ...)")
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
    return await run_group(request.app.state.backend, group, root)
