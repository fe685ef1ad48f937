"""HTTP routes of the hf policy server. Thin: each fetches a service object from `app.state` and calls it."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request, Response

from veri.core.auth import bearer, refusal
from veri.core.policy_api import CompletionRequest, CompletionResponse, PolicyVersionResponse, UpdateWeightsRequest
from veri.services.policy.hf.batcher import Batcher
from veri.services.policy.hf.loader import LoadedModel
from veri.services.policy.hf.metrics import policy_metrics
from veri.services.policy.hf.serving import CompletionServing
from veri.services.policy.hf.weights import read_update

router = APIRouter()


def _serving(request: Request) -> CompletionServing:
    return request.app.state.serving


def _batcher(request: Request) -> Batcher:
    return request.app.state.batcher


def _model(request: Request) -> LoadedModel:
    return request.app.state.model


@router.post("/v1/completions")
async def create_completion(body: CompletionRequest, request: Request) -> CompletionResponse:
    response = await _serving(request).create_completion(body)
    policy_metrics(request).completion_served(response)
    return response


@router.get("/v1/models")
async def list_models(request: Request) -> dict:
    model = _model(request)
    card = {
        "id": model.name,
        "object": "model",
        "created": request.app.state.started,
        "owned_by": "veri",
        "root": str(request.app.state.settings.model_dir),
        "parent": None,
        "max_model_len": model.max_model_len,
        "permission": [],
    }
    return {"object": "list", "data": [card]}


@router.get("/health")
async def health() -> Response:
    return Response(status_code=200)  # routes only exist once the lifespan has loaded the model


@router.get("/policy_version")
async def policy_version(request: Request) -> PolicyVersionResponse:
    return PolicyVersionResponse(policy_version=_batcher(request).policy_version, process=request.app.state.process)


def require_control(request: Request) -> None:
    """The weight route is a control route: the stack's token, or loopback clients without one."""
    why = refusal(token=request.app.state.settings.token, presented=bearer(request.headers.get("authorization")),
                  client_host=request.client.host if request.client else None, what="weight updates")
    if why:
        raise HTTPException(status_code=401, detail=why)


@router.post("/update_weights", dependencies=[Depends(require_control)])
async def update_weights(body: UpdateWeightsRequest, request: Request) -> PolicyVersionResponse:
    update = await asyncio.to_thread(read_update, Path(body.path), _model(request).model)
    update = dataclasses.replace(update, version=body.policy_version)
    return PolicyVersionResponse(policy_version=await _batcher(request).update_weights(update),
                                 process=request.app.state.process)


@router.get("/stats")
async def stats(request: Request) -> dict:
    """Engine counters: batching (peak rows / requests per decode step), updates, failures."""
    return {"uptime_s": round(time.time() - request.app.state.started, 3), **_batcher(request).snapshot()}


def attach_router(app: FastAPI) -> None:
    app.include_router(router)
