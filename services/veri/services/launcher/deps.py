"""Typed accessors for what the launcher app builds once at startup (no getattr probing), and the token
check every group route depends on."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, HTTPException, Request

from veri.core.auth import bearer, refusal
from veri.services.launcher.backend import GatedBackend
from veri.services.launcher.settings import LauncherSettings


def launcher_settings(request: Request) -> LauncherSettings:
    return request.app.state.settings


def gated_backend(request: Request) -> GatedBackend:
    return request.app.state.backend


SettingsDep = Annotated[LauncherSettings, Depends(launcher_settings)]
BackendDep = Annotated[GatedBackend, Depends(gated_backend)]


def require_token(request: Request, settings: SettingsDep,
                  authorization: Annotated[str | None, Header()] = None) -> None:
    """401 unless the request bears the launcher's token, or (no token set) comes from loopback."""
    why = refusal(token=settings.token, presented=bearer(authorization),
                  client_host=request.client.host if request.client else None, what="the launcher's group routes")
    if why:
        raise HTTPException(status_code=401, detail=why)
