"""How the trainer gets a group of harness rollouts run: the `RolloutRunner` protocol.

Two ways to serve it, same method:
  - in-process, over a sandbox backend (`BackendRunner`): `local` (dev only, a plain subprocess) or
    `docker` (gVisor), the launcher's own `run_group`;
  - the launcher service over HTTP (`veri.services.launcher.client.LauncherClient`), when the trainer runs in
    its own container.
Per-rollout output folders land under the runner's output root; the trainer reads them (rewards),
so a remote launcher must write them to a folder the trainer sees at the same path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from veri.core.launch import GroupLaunch, LaunchResult
from veri.services.launcher.backend import SandboxBackend
from veri.services.launcher.group import run_group

SANDBOXES = ("local", "docker", "launcher")


class RolloutRunner(Protocol):
    async def run_group(self, group: GroupLaunch) -> list[LaunchResult]:
        """Run every launch to its end; one result per launch, in the launches' order. Never raises for
        harness behaviour or a broken sandbox: those are results (`failed`, `infrastructure_error`)."""
        ...


class BackendRunner:
    """The launcher's group runner over a backend in this process."""

    def __init__(self, backend: SandboxBackend, output_root: Path) -> None:
        self.backend = backend
        self.output_root = output_root

    async def run_group(self, group: GroupLaunch) -> list[LaunchResult]:
        return await run_group(self.backend, group, self.output_root)


def launcher_runner(url: str, *, token: str | None, subdir: str) -> RolloutRunner:
    """The launcher service's client: outputs land in <its output root>/<subdir>/<rollout_id>."""
    from veri.services.launcher.client import LauncherClient

    return LauncherClient(url, token=token, subdir=subdir)


def sandbox_backend(name: str) -> SandboxBackend:
    """`local` or `docker` (imported only when asked for: it needs the Docker SDK and a daemon)."""
    if name == "local":
        from veri.services.launcher.local import LocalBackend

        return LocalBackend()
    if name == "docker":
        from veri.services.launcher.docker_backend import DockerBackend

        return DockerBackend()
    raise ValueError(f"no in-process backend {name!r}: use local or docker")
