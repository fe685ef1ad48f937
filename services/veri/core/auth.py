"""The one auth rule of every service with control routes (proxy control, launcher, the hf policy's
weight routes, the console): with a token, a request must bear it (`Authorization: Bearer <token>`);
without one, loopback clients only. A service bound to a non-loopback address without a token is
refused at start (`refuse_open_bind`), so "no token" can never mean "anyone on the network"."""

from __future__ import annotations

import ipaddress
import os
import secrets

from veri.core import envs

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


class BindRefused(ValueError):
    """A non-loopback bind without a token: the message names the fix."""


def is_loopback(host: str | None) -> bool:
    """`host` (an address or a name) is this machine only: 127.0.0.0/8, ::1 or localhost."""
    if not host:
        return False
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bearer(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, else None."""
    scheme, _, value = (authorization or "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def refusal(*, token: str | None, presented: str | None, client_host: str | None, what: str) -> str | None:
    """Why a control request is refused (None: allowed). `presented` is the token the request bears."""
    if token:
        if presented is not None and secrets.compare_digest(presented, token):
            return None
        return f"{what} need the stack's control token (Authorization: Bearer ...)"
    if is_loopback(client_host):
        return None
    return (f"no control token is configured: {what} accept loopback clients only; "
            f"set {envs.VERI_CONTROL_TOKEN} to allow remote clients")


def refuse_open_bind(*, service: str, host: str, token: str | None, allow_env: str | None = None,
                     token_env: str = envs.VERI_CONTROL_TOKEN) -> None:
    """Raise `BindRefused` for a non-loopback `host` without a token (the fix in the message).

    `allow_env`: a service whose container binds 0.0.0.0 behind a port published on 127.0.0.1 only
    (the console under compose) says so with that variable set to 1; nothing else opens the bind."""
    if token or is_loopback(host):
        return
    if allow_env and os.environ.get(allow_env) == "1":
        return
    hint = f", or {allow_env}=1 when only a port published on 127.0.0.1 reaches it" if allow_env else ""
    raise BindRefused(f"{service}: --host {host} is reachable from other machines but no control token is set: "
                      f"set {token_env}, or bind 127.0.0.1{hint}")
