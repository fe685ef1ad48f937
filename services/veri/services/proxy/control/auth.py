"""The control token check of the proxy's /control and /metrics routes: core/auth.py's one rule over the
proxy's settings (a token: the request must bear it; none: loopback clients only)."""

from __future__ import annotations

from fastapi import Request

from veri.core.auth import bearer, refusal
from veri.services.proxy.errors import ControlUnauthorized


def require_control(request: Request) -> None:
    why = refusal(token=request.app.state.settings.control_token,
                  presented=bearer(request.headers.get("authorization")),
                  client_host=request.client.host if request.client else None, what="control routes")
    if why:
        raise ControlUnauthorized(why)
