"""The console against other web pages (docs/security.md): a page elsewhere in the user's browser must not read
trajectories through it.

- `Host` check: a DNS-rebinding page reaches 127.0.0.1:8300 under its own name; any Host that is not
  loopback or a configured name is answered 400 before a route runs.
- Content-Security-Policy on every answer: scripts and styles from the console alone, no frames.
- A token when the console is reachable from other machines: `Authorization: Bearer`, or `?token=` once
  (it sets an HttpOnly, SameSite=Strict cookie, so links and the event stream keep working).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from urllib.parse import parse_qs

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from veri.core.auth import LOOPBACK_NAMES, bearer

CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
COOKIE = "veri_console_token"
OPEN_PATHS = ("/health",)  # the container's healthcheck: no data


def host_name(host_header: str) -> str:
    """The name of a Host header, without its port ('[::1]:8300' -> '::1')."""
    if host_header.startswith("["):
        return host_header[1:].partition("]")[0]
    return host_header.rpartition(":")[0] if host_header.count(":") == 1 else host_header


class ConsoleGuard:
    """ASGI middleware: the Host check, the token, and the security headers."""

    def __init__(self, app: ASGIApp, *, allowed_hosts: Iterable[str] = (), token: str | None = None) -> None:
        self.app = app
        self.allowed = {name.lower() for name in LOOPBACK_NAMES} | {name.lower() for name in allowed_hosts}
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        name = host_name(headers.get("host", "")).lower()
        if name not in self.allowed and scope["path"] not in OPEN_PATHS:
            refused = PlainTextResponse(
                f"the console does not answer for Host {name or '(none)'!r}: open it as http://127.0.0.1:<port>, "
                "or add the name with `veri serve console --allowed-host NAME` (VERI_CONSOLE_HOSTS)", status_code=400)
            await self._send(refused, scope, receive, send)
            return
        from_query = None
        if self.token and scope["path"] not in OPEN_PATHS:
            presented = bearer(headers.get("authorization")) or _cookie(headers, COOKIE)
            from_query = (parse_qs(scope.get("query_string", b"").decode()).get("token") or [None])[0]
            if not any(value and secrets.compare_digest(value, self.token) for value in (presented, from_query)):
                refused = PlainTextResponse("the console needs its token: open the URL `make up` printed "
                                            "(…?token=...), or send Authorization: Bearer <token>", status_code=401)
                await self._send(refused, scope, receive, send)
                return

        remember = from_query is not None and secrets.compare_digest(from_query, self.token or "")

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = [(b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
                         (b"referrer-policy", b"no-referrer")]
                if remember:
                    extra.append((b"set-cookie", f"{COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/".encode()))
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, with_headers)

    @staticmethod
    async def _send(response: Response, scope: Scope, receive: Receive, send: Send) -> None:
        response.headers["content-security-policy"] = CSP
        await response(scope, receive, send)


def _cookie(headers: Headers, name: str) -> str | None:
    for part in headers.get("cookie", "").split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None
