"""Typed accessors for what the app builds once at startup (no getattr probing)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import orjson
from fastapi import Request, Response
from pydantic import BaseModel, ValidationError

from veri.services.proxy.capture import CaptureService
from veri.services.proxy.errors import InvalidRequest
from veri.services.proxy.history import RequestIdentity
from veri.services.proxy.requests import check_tool_count, presented_key, read_json_body
from veri.services.proxy.store import SessionRow
from veri.services.proxy.timing import phase

Model = TypeVar("Model", bound=BaseModel)


def capture_service(request: Request) -> CaptureService:
    return request.app.state.capture


def served_model(request: Request) -> str:
    return request.app.state.model_name


def json_response(body: dict[str, Any], status_code: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status_code, media_type="application/json")


def parse_body(model: type[Model], body: dict[str, Any]) -> Model:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'body'}: {error['msg']}" for error in exc.errors()[:5]
        )
        raise InvalidRequest(f"invalid request: {problems}") from exc


@dataclass(frozen=True)
class RolloutCall(Generic[Model]):
    """An authorized harness request: its session, raw body (recorded as sent) and parsed body."""

    capture: CaptureService
    session: SessionRow
    body: dict[str, Any]
    parsed: Model
    identity: RequestIdentity  # recognises the client's retry of this request


async def rollout_call(request: Request, rollout_id: str, model: type[Model]) -> RolloutCall[Model]:
    capture = capture_service(request)
    with phase("request"):
        session = capture.store.authorize(rollout_id, presented_key(request))
        body = await read_json_body(request, capture.settings.max_body_bytes)
        check_tool_count(body)
        identity = RequestIdentity.of(request.url.path, body, request.headers)
        return RolloutCall(capture, session, body, parse_body(model, body), identity)
