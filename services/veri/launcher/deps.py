"""Typed accessors for what the launcher app builds once at startup (no getattr probing), and the token
check every group route depends on."""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import Depends, Header, HTTPException, Request

from veri.launcher.backend import GatedBackend
from veri.launcher.settings import LauncherSettings


def launcher_settings(request: Request) -> LauncherSettings:
    return request.app.state.settings


def gated_backend(request: Request) -> GatedBackend:
    return request.app.state.backend


SettingsDep = Annotated[LauncherSettings, Depends(launcher_settings)]
BackendDep = Annotated[GatedBackend, Depends(gated_backend)]


def require_token(settings: SettingsDep, authorization: Annotated[str | None, Header()] = None) -> None:
    """401 unless the launcher has no token or the request bears it (`Authorization: Bearer <token>`)."""
    if not settings.token:
        return
    scheme, _, value = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not secrets.compare_digest(value.strip(), settings.token):
        raise HTTPException(status_code=401, detail="launcher token required (Authorization: Bearer ...)")
