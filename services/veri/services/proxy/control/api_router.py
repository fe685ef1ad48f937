"""Control routes (trainer / `veri session`): open, inspect and close rollout sessions; announce the
policy version; per-replica counts (`GET /control/replicas`); a session's recorded requests and the
proxy's capture settings (`veri replay record`).

They need the stack's control token; a proxy started without one accepts loopback clients only.
Sandboxes never see the token and never reach these routes through the policy URLs.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field

from veri.core.records import CaptureConfig, RecordedRequest, ReplicaStats, SessionCreate, SessionInfo, Span
from veri.services.proxy.control.auth import require_control
from veri.services.proxy.deps import capture_service, parse_body
from veri.services.proxy.rendering import model_fingerprint
from veri.services.proxy.requests import read_json_body
from veri.services.proxy.store import SessionRow


class PolicyVersionUpdate(BaseModel):
    version: int = Field(ge=0)


router = APIRouter(prefix="/control", dependencies=[Depends(require_control)])


def _info(request: Request, row: SessionRow) -> SessionInfo:
    base = capture_service(request).settings.public_url or str(request.base_url).rstrip("/")
    rollout_base = f"{base}/r/{row.rollout_id}"
    return SessionInfo(rollout_id=row.rollout_id, api_key=row.api_key, openai_base_url=f"{rollout_base}/v1",
                       anthropic_base_url=rollout_base, status=row.status, metadata=row.metadata)


@router.post("/sessions")
async def open_session(request: Request) -> SessionInfo:
    capture = capture_service(request)
    raw = await read_json_body(request, capture.settings.max_body_bytes) if await request.body() else {}
    create = parse_body(SessionCreate, raw)
    row = capture.store.open_session(create.rollout_id, create.metadata)
    if create.record_requests:
        capture.store.record_requests_of(row.rollout_id)
    return _info(request, row)


@router.get("/sessions/{rollout_id}")
async def get_session(rollout_id: str, request: Request) -> SessionInfo:
    return _info(request, capture_service(request).store.get_session(rollout_id))


@router.get("/sessions/{rollout_id}/spans")
async def session_spans(rollout_id: str, request: Request) -> list[Span]:
    return capture_service(request).store.spans(rollout_id)


@router.get("/sessions/{rollout_id}/requests")
async def session_requests(rollout_id: str, request: Request) -> list[RecordedRequest]:
    """The harness's requests as sent, for a session that records them (`veri replay record`)."""
    return capture_service(request).store.recorded_requests(rollout_id)


@router.get("/config")
async def capture_config(request: Request) -> CaptureConfig:
    """What this proxy's spans depend on besides the traffic (a replay needs the same)."""
    settings = capture_service(request).settings
    return CaptureConfig(
        renderer=settings.renderer, chat_template_kwargs=settings.chat_template_kwargs,
        thinking_retention=settings.thinking_retention, temperature=settings.temperature, top_p=settings.top_p,
        max_tokens=settings.max_tokens, model_fingerprint=model_fingerprint(settings.model_dir),
    )


@router.put("/policy_version")
async def set_policy_version(request: Request) -> dict[str, int]:
    """The trainer announces the policy version after a weight sync to a backend that does not
    report one itself (vLLM); spans then carry it."""
    capture = capture_service(request)
    body = parse_body(PolicyVersionUpdate, await read_json_body(request, capture.settings.max_body_bytes))
    capture.store.set_policy_version(body.version)
    return {"policy_version": body.version}


@router.get("/replicas")
async def replicas(request: Request) -> list[ReplicaStats]:
    """Each policy replica: its sessions, the calls it served, and its prefix-cache hit rate."""
    return capture_service(request).store.replica_stats()


@router.post("/sessions/{rollout_id}/close")
async def close_session(rollout_id: str, request: Request) -> SessionInfo:
    return _info(request, capture_service(request).store.close_session(rollout_id))
