"""Route templates for the per-route metrics, with FastAPI's nested routers and with the flat route list
older FastAPI has (vLLM's pin, in the vLLM images that also carry veri)."""

from __future__ import annotations

import fastapi.routing
import pytest
from fastapi import APIRouter, FastAPI

from veri.infra.metrics import route_templates


def _app() -> FastAPI:
    router = APIRouter()

    @router.post("/r/{rollout_id}/v1/messages")
    def messages(rollout_id: str) -> dict:
        return {}

    app = FastAPI()
    app.include_router(router)

    @app.get("/health")
    def health() -> dict:
        return {}

    return app


def test_nested_routers_give_their_templates() -> None:
    assert {"/r/{rollout_id}/v1/messages", "/health"} <= set(route_templates(_app().routes))


def test_without_iter_route_contexts_the_flat_list_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    app = _app()
    monkeypatch.delattr(fastapi.routing, "iter_route_contexts", raising=False)
    flat = route_templates(app.routes)
    assert "/health" in flat
    assert all(isinstance(path, str) for path in flat)
