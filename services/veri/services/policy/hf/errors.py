"""The hf backend's exceptions and the one mapper from exception to an OpenAI-shaped error body.

    PolicyError
    ├── PolicyClientError (4xx: the caller can fix it)
    │   ├── InvalidRequest       400 (`param` names the field)
    │   ├── ModelNotFound        404
    │   └── WeightUpdateRejected 400 (the old weights stay in place)
    └── PolicyServerError (5xx)
        └── EngineFailure        500 (a forward pass failed; the engine stays up)
"""

from __future__ import annotations

from http import HTTPStatus

from fastapi.responses import JSONResponse


class PolicyError(Exception):
    status: HTTPStatus = HTTPStatus.INTERNAL_SERVER_ERROR
    error_type = "InternalServerError"

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class PolicyClientError(PolicyError):
    status = HTTPStatus.BAD_REQUEST
    error_type = "BadRequestError"


class InvalidRequest(PolicyClientError):
    pass


class ModelNotFound(PolicyClientError):
    status = HTTPStatus.NOT_FOUND
    error_type = "NotFoundError"


class WeightUpdateRejected(PolicyClientError):
    pass


class PolicyServerError(PolicyError):
    pass


class EngineFailure(PolicyServerError):
    pass


def error_body(message: str, *, error_type: str, status: int, param: str | None = None) -> dict:
    """OpenAI's error shape, as vLLM returns it."""
    return {"error": {"message": message, "type": error_type, "param": param, "code": status}}


def error_response(exc: PolicyError) -> JSONResponse:
    body = error_body(exc.message, error_type=exc.error_type, status=int(exc.status), param=exc.param)
    return JSONResponse(body, status_code=int(exc.status))
