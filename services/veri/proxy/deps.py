"""Typed accessors for what the app builds once at startup (no getattr probing)."""

from __future__ import annotations

from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError

from veri.proxy.capture import CaptureService
from veri.proxy.errors import InvalidRequest

Model = TypeVar("Model", bound=BaseModel)


def capture_service(request: Request) -> CaptureService:
    return request.app.state.capture


def served_model(request: Request) -> str:
    return request.app.state.model_name


def parse_body(model: type[Model], body: dict[str, Any]) -> Model:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'body'}: {error['msg']}" for error in exc.errors()[:5]
        )
        raise InvalidRequest(f"invalid request: {problems}") from exc
