"""`veri serve launcher`: the sandbox launcher as a service (FastAPI).

The trainer posts a group of rollouts and gets one result per rollout when the group is done
(`LauncherClient`). At start the launcher removes the sandboxes a crashed run of it left behind. Its
port belongs on the control network only: sandboxes never reach it (nor the docker socket it holds).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import structlog
from fastapi import FastAPI

from veri.core.launch import LaunchResult, RolloutLaunch
from veri.launcher.api_router import router
from veri.launcher.backend import SandboxBackend

log = structlog.get_logger("veri.launcher")


@dataclass
class LauncherSettings:
    backend: str = "docker"  # docker | local (dev only: no isolation)
    network: str = "veri-rollouts"
    output_root: Path = Path("build/rollouts")
    launcher_id: str = "default"
    max_parallel_rollouts: int = 64  # sandboxes alive at once, over every group being run
    unsafe_runc: bool = False
    token: str | None = None  # when set, POST /v1/groups needs `Authorization: Bearer <token>`
    host_paths: dict[str, str] = field(default_factory=dict)


class GatedBackend:
    """A backend behind one semaphore: at most `limit` rollouts run at once, whatever the groups."""

    def __init__(self, inner: SandboxBackend, limit: int) -> None:
        self.inner = inner
        self.name = inner.name
        self._gate = asyncio.Semaphore(limit)

    async def run(self, launch: RolloutLaunch, output_dir: Path) -> LaunchResult:
        async with self._gate:
            return await self.inner.run(launch, output_dir)

    async def remove_leftovers(self) -> int:
        return await self.inner.remove_leftovers()


def make_backend(settings: LauncherSettings) -> SandboxBackend:
    if settings.backend == "local":
        from veri.launcher.local import LocalBackend

        log.warning("backend local: harnesses run as plain processes on this machine - no isolation (dev only)")
        return LocalBackend()
    if settings.backend == "docker":
        from veri.launcher.docker_backend import DockerBackend

        return DockerBackend(network=settings.network, unsafe_runc=settings.unsafe_runc,
                             launcher_id=settings.launcher_id, max_sandboxes=settings.max_parallel_rollouts,
                             host_paths=settings.host_paths or None)
    raise ValueError(f"unknown launcher backend {settings.backend!r}: use docker or local")


def create_app(settings: LauncherSettings, backend: SandboxBackend | None = None) -> FastAPI:
    """The app; `backend` replaces the one `settings` names (tests)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        inner = backend or make_backend(settings)
        removed = await inner.remove_leftovers()
        if removed:
            log.warning("removed sandboxes a previous launcher left behind", count=removed)
        app.state.backend = GatedBackend(inner, settings.max_parallel_rollouts)
        log.info("launcher ready", backend=inner.name, network=settings.network,
                 output_root=str(settings.output_root.absolute()), max_parallel=settings.max_parallel_rollouts)
        try:
            yield
        finally:
            close = getattr(inner, "close", None)
            if close:
                close()

    app = FastAPI(title="veri launcher", lifespan=lifespan)
    app.state.settings = settings
    app.include_router(router)
    return app


def serve(settings: LauncherSettings, host: str, port: int) -> None:
    """Refuses to start (SandboxUnavailable, with the fix) before binding the port when the backend
    cannot run sandboxes here: no daemon, no runsc, no rollouts network."""
    import uvicorn

    backend = make_backend(settings)
    uvicorn.run(create_app(settings, backend), host=host, port=port, log_level="info", timeout_keep_alive=3600)


def check_token(settings: LauncherSettings, header: str | None) -> bool:
    if not settings.token:
        return True
    scheme, _, value = (header or "").partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(value.strip(), settings.token)
