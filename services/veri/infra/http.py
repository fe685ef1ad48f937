"""One small JSON-over-HTTP client for veri's services calling each other.

`JsonClient` (sync) and `AsyncJsonClient` (async) send one request, expect a 200 with a JSON body, and
raise one `HttpCallError` otherwise: which service, at which URL, what failed, and what to do.

    HttpCallError                    the call failed; `status` is None when no answer came back
    ├── ControlError                 (veri.services.proxy.control_client) the proxy's control routes
    └── PolicyAdminError             (veri.services.policy.hf.admin_client) the hf policy server's weight routes

Callers name their own subclass (`error=`), so they catch what they always caught.

Connection failures (refused, connect timeout) are retried by httpx's own transport
(`retries=N`: N more tries, backing off 0, 0.5, 1, 2, 4 ... seconds). Nothing else is retried: a request
that reached the server may have done its work already.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Self

import httpx
from pydantic import BaseModel

DETAIL_CHARS = 500  # of an error body, enough for a FastAPI `detail` or a traceback's last line


class HttpCallError(RuntimeError):
    """A call to another service failed. The message names the service, the URL and the fix."""

    def __init__(self, service: str, base_url: str, method: str, path: str, status: int | None, detail: str,
                 fix: str) -> None:
        self.service = service
        self.base_url = base_url
        self.method = method
        self.path = path
        self.status = status  # None: no answer (unreachable, timed out, cut off)
        self.detail = detail
        self.fix = fix
        super().__init__(f"{service} at {base_url}: {method} {path} -> {self.outcome}: {detail}; {fix}")

    @property
    def outcome(self) -> str:
        return "no answer" if self.status is None else str(self.status)


def auth_headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def _request_kwargs(json: Any) -> dict[str, Any]:
    # A pydantic model is sent as its own JSON (aliases, datetimes), the same bytes the server parses.
    if isinstance(json, BaseModel):
        return {"content": json.model_dump_json(), "headers": {"content-type": "application/json"}}
    return {} if json is None else {"json": json}


class _CallShape:
    """What both clients share: their settings and how an exchange becomes a value or an error."""

    def __init__(self, service: str, base_url: str, error: type[HttpCallError], unreachable_fix: str) -> None:
        self.service = service
        self.base_url = base_url.rstrip("/")
        self.error = error
        self.unreachable_fix = unreachable_fix

    def failed(self, method: str, path: str, exc: httpx.HTTPError) -> HttpCallError:
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
            return self.error(self.service, self.base_url, method, path, None, f"unreachable ({detail})",
                              self.unreachable_fix)
        return self.error(self.service, self.base_url, method, path, None, detail, "see the service's log")

    def value(self, method: str, path: str, reply: httpx.Response) -> Any:
        if reply.status_code != 200:
            fix = "check the token (VERI_CONTROL_TOKEN)" if reply.status_code in (401, 403) else "see the service's log"
            raise self.error(self.service, self.base_url, method, path, reply.status_code,
                             reply.text[:DETAIL_CHARS], fix)
        try:
            return reply.json()
        except ValueError:
            raise self.error(self.service, self.base_url, method, path, 200,
                             f"not JSON: {reply.text[:DETAIL_CHARS]!r}", "is this URL really that service?") from None


def _limits(keepalive: bool) -> httpx.Limits:
    # keepalive=False: a connection reused just as the server closes it fails the request, and a POST
    # that opened something must not be retried blindly; a fresh connection per call avoids the race.
    return httpx.Limits(max_connections=100, max_keepalive_connections=20 if keepalive else 0)  # httpx's default


class JsonClient:
    """Synchronous JSON calls to one service. `transport` replaces the network (tests: MockTransport)."""

    def __init__(self, base_url: str, *, service: str, token: str | None = None,
                 timeout_s: float | httpx.Timeout = 30.0, keepalive: bool = True, retries: int = 0,
                 error: type[HttpCallError] = HttpCallError,
                 unreachable_fix: str = "is it running? check the URL",
                 transport: httpx.BaseTransport | None = None) -> None:
        self.shape = _CallShape(service, base_url, error, unreachable_fix)
        limits = _limits(keepalive)
        self._http = httpx.Client(
            base_url=self.shape.base_url, headers=auth_headers(token), timeout=timeout_s, limits=limits,
            transport=transport or httpx.HTTPTransport(retries=retries, limits=limits),
        )

    @property
    def base_url(self) -> str:
        return self.shape.base_url

    def call(self, method: str, path: str, *, json: Any = None, params: dict[str, str] | None = None,
             timeout_s: float | httpx.Timeout | None = None) -> Any:
        """The reply's JSON; raises the client's `error` for no answer, a non-200 or a non-JSON body.
        `timeout_s`: this call's bound instead of the client's."""
        timeout = httpx.USE_CLIENT_DEFAULT if timeout_s is None else timeout_s
        try:
            reply = self._http.request(method, path, params=params, timeout=timeout, **_request_kwargs(json))
        except httpx.HTTPError as exc:
            raise self.shape.failed(method, path, exc) from exc
        return self.shape.value(method, path, reply)

    def command(self, method: str, path: str, *, params: dict[str, str] | None = None,
                timeout_s: float | httpx.Timeout | None = None) -> None:
        """A call answered 200 with no body (vLLM's /sleep, /wake_up); raises like `call` otherwise."""
        timeout = httpx.USE_CLIENT_DEFAULT if timeout_s is None else timeout_s
        try:
            reply = self._http.request(method, path, params=params, timeout=timeout)
        except httpx.HTTPError as exc:
            raise self.shape.failed(method, path, exc) from exc
        if reply.status_code != 200 or reply.content:
            self.shape.value(method, path, reply)  # the error for a non-200; a body is tolerated

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


class AsyncJsonClient:
    """`JsonClient` for async callers; the same arguments and errors."""

    def __init__(self, base_url: str, *, service: str, token: str | None = None,
                 timeout_s: float | httpx.Timeout = 30.0, keepalive: bool = True, retries: int = 0,
                 error: type[HttpCallError] = HttpCallError,
                 unreachable_fix: str = "is it running? check the URL",
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.shape = _CallShape(service, base_url, error, unreachable_fix)
        limits = _limits(keepalive)
        self._http = httpx.AsyncClient(
            base_url=self.shape.base_url, headers=auth_headers(token), timeout=timeout_s, limits=limits,
            transport=transport or httpx.AsyncHTTPTransport(retries=retries, limits=limits),
        )

    @property
    def base_url(self) -> str:
        return self.shape.base_url

    async def call(self, method: str, path: str, *, json: Any = None, params: dict[str, str] | None = None) -> Any:
        try:
            reply = await self._http.request(method, path, params=params, **_request_kwargs(json))
        except httpx.HTTPError as exc:
            raise self.shape.failed(method, path, exc) from exc
        return self.shape.value(method, path, reply)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()
