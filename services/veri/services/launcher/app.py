"""`veri serve launcher`: the sandbox launcher as a service (FastAPI). `create_app(settings)` assembles it,
`serve(settings, host, port)` runs it under uvicorn.

The trainer posts a group of rollouts and gets one result per rollout when the group is done
(`LauncherClient`). At start the launcher removes the sandboxes a crashed run of it left behind. Its
port belongs on the control network only: sandboxes never reach it (nor the docker socket it holds).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import structlog
from fastapi import FastAPI

from veri.infra.logging import AccessLog
from veri.services.launcher.api_router import router
from veri.services.launcher.backend import GatedBackend, SandboxBackend
from veri.services.launcher.metrics import LauncherMetrics, MeteredBackend
from veri.services.launcher.metrics import router as metrics_router
from veri.services.launcher.settings import LauncherSettings

log = structlog.get_logger("veri.launcher")


def make_backend(settings: LauncherSettings) -> SandboxBackend:
    """The backend `settings` names. Raises SandboxUnavailable (with the fix) when it cannot run here."""
    if settings.backend == "local":
        from veri.services.launcher.local import LocalBackend

        log.warning("backend local: harnesses run as plain processes on this machine - no isolation (dev only)")
        return LocalBackend()
    if settings.backend == "kubernetes":
        from veri.services.launcher.kubernetes.backend import KubernetesBackend

        return KubernetesBackend(
            namespace=settings.namespace, launcher_id=settings.launcher_id, output_root=settings.output_root,
            output_claim=settings.output_claim, runtime_class=settings.runtime_class, registry=settings.registry,
            proxy_port=settings.proxy_port, max_sandboxes=settings.max_parallel_rollouts,
            create_per_second=settings.create_per_second, create_burst=settings.create_burst,
            egress=settings.sandbox_egress, registry_insecure=settings.registry_insecure,
            kubeconfig=settings.kubeconfig, host_aliases=settings.host_aliases or None,
            output_host_path=_on_host(settings.output_root, settings.host_paths))
    from veri.services.launcher.docker_backend import DockerBackend

    return DockerBackend(network=settings.network, unsafe_runc=settings.unsafe_runc,
                         launcher_id=settings.launcher_id, max_sandboxes=settings.max_parallel_rollouts,
                         host_paths=settings.host_paths or None)


def _on_host(path: Path, host_paths: dict[str, str]) -> str | None:
    """`path` as the host sees it, through the longest --host-path folder it lies under (None: as here)."""
    path = path.absolute()
    for here in sorted(host_paths, key=len, reverse=True):
        if path.is_relative_to(here):
            return str(Path(host_paths[here]) / path.relative_to(here))
    return None


def create_app(settings: LauncherSettings, backend: SandboxBackend | None = None) -> FastAPI:
    """The app; `backend` replaces the one `settings` names (tests, and `serve`, which builds it first)."""
    metrics = LauncherMetrics()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        inner = backend or make_backend(settings)
        removed = await inner.remove_leftovers()
        if removed:
            log.warning("removed sandboxes a previous launcher left behind", count=removed)
        app.state.settings = settings
        app.state.backend = GatedBackend(MeteredBackend(inner, metrics), settings.max_parallel_rollouts)
        log.info("launcher ready", backend=inner.name, network=settings.network,
                 output_root=str(settings.output_root.absolute()), max_parallel=settings.max_parallel_rollouts)
        try:
            yield
        finally:
            app.state.backend.close()

    app = FastAPI(title="veri launcher", lifespan=lifespan)
    app.include_router(router)
    app.include_router(metrics_router)
    app.state.metrics = metrics
    app.add_middleware(metrics.routes.middleware)
    app.add_middleware(AccessLog)
    return app


def serve(settings: LauncherSettings, host: str, port: int) -> None:
    """Refuses to start (SandboxUnavailable, with the fix) before binding the port when the backend
    cannot run sandboxes here: no daemon, no runsc, no rollouts network."""
    import uvicorn

    backend = make_backend(settings)
    # log_config=None: uvicorn keeps the JSON stream's handlers (infra/logging.py); AccessLog writes each request.
    uvicorn.run(create_app(settings, backend), host=host, port=port, log_level="info", log_config=None,
                access_log=False, timeout_keep_alive=3600)
