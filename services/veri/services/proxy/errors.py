"""The proxy's exceptions and the one mapping from each to an HTTP status.

    ProxyError
    ├── ClientError (4xx: the harness sent something we refuse)
    │   ├── InvalidRequest          400  malformed body / schema
    │   ├── UnsupportedContent      400  image / document / audio blocks
    │   ├── HostedToolsRefused      400  hosted tools, under hosted_tools: refuse
    │   ├── InvalidApiKey           401  not this rollout's key
    │   ├── ControlUnauthorized     401  missing / wrong control token
    │   ├── UnknownRollout          404
    │   ├── SessionClosed           409
    │   ├── RouteRefused            404 / 405  no such route, or not with this method
    │   └── BodyTooLarge            413
    └── ServerError (5xx)
        ├── PolicyUnavailable       503  policy down or erroring; no span is recorded
        │   └── PolicyAborted       503  the policy aborted the call (weight sync, shutdown): retry it
        ├── CaptureFailed           500  the span could not be stored; the response is withheld
        └── StoreBusy               503  another writer held the span store past its busy timeout: retry

Routes translate these into each protocol's own error body (see openai/ and anthropic/).
"""

from __future__ import annotations


class ProxyError(Exception):
    status_code = 500
    openai_type = "server_error"
    anthropic_type = "api_error"

    def __init__(self, message: str, *, param: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param


class ClientError(ProxyError):
    status_code = 400
    openai_type = "invalid_request_error"
    anthropic_type = "invalid_request_error"


class InvalidRequest(ClientError):
    pass


class UnsupportedContent(ClientError):
    pass


class HostedToolsRefused(InvalidRequest):
    """The request has hosted tools (a provider runs them) and the job says `hosted_tools: refuse`."""

    def __init__(self, types: list[str]):
        super().__init__(
            f"tools of type {', '.join(types)} are hosted tools: veri serves function tools only (the policy writes"
            " the call, your harness runs it), and this job has hosted_tools: refuse. Set hosted_tools: drop in the"
            " job config to leave them out of the prompt, turn them off in the harness (Codex: web_search ="
            ' "disabled"), or define them as type function', param="tools")


class InvalidApiKey(ClientError):
    status_code = 401
    openai_type = "authentication_error"
    anthropic_type = "authentication_error"


class ControlUnauthorized(InvalidApiKey):
    pass


class UnknownRollout(ClientError):
    status_code = 404
    openai_type = "not_found_error"
    anthropic_type = "not_found_error"


class SessionClosed(ClientError):
    status_code = 409
    openai_type = "conflict_error"
    anthropic_type = "invalid_request_error"


class RouteRefused(ClientError):
    openai_type = anthropic_type = "not_found_error"

    @classmethod
    def of(cls, method: str, path: str, status_code: int, detail: str) -> RouteRefused:
        what = {404: "no such route", 405: f"{method} is not allowed here"}.get(status_code, detail)
        error = cls(f"{method} {path}: {what}; a rollout's routes are POST /r/<rollout>/v1/chat/completions, "
                    "/v1/completions, /v1/responses, /v1/messages, /v1/messages/count_tokens and GET /v1/models")
        error.status_code = status_code
        return error


class BodyTooLarge(ClientError):
    status_code = 413
    openai_type = "invalid_request_error"
    anthropic_type = "request_too_large"


class ServerError(ProxyError):
    pass


class PolicyUnavailable(ServerError):
    status_code = 503
    openai_type = "service_unavailable"
    anthropic_type = "overloaded_error"


class PolicyAborted(PolicyUnavailable):
    """vLLM answered `finish_reason: "abort"`: the completion is cut short and never recorded.

    503 (not 200 with a partial answer) so the harness's SDK retries it; the retry renders the same
    prompt, since the aborted call left no span to bridge from."""


class CaptureFailed(ServerError):
    status_code = 500


class StoreBusy(ServerError):
    """SQLite stayed locked by another writer past `store.BUSY_TIMEOUT_S`: refused at once (a wait
    blocks the worker's event loop, every call on it), and retryable like any 503."""

    status_code = 503
    openai_type = "service_unavailable"
    anthropic_type = "overloaded_error"


def openai_error_body(error: ProxyError) -> dict:
    return {"error": {"message": error.message, "type": error.openai_type, "param": error.param, "code": None}}


def anthropic_error_body(error: ProxyError) -> dict:
    return {"type": "error", "error": {"type": error.anthropic_type, "message": error.message}}
