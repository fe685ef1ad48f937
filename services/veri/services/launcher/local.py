"""`local` backend: the harness entrypoint as a plain subprocess. Development only — it isolates
nothing. Here `RolloutLaunch.image` is the bundle *folder* (no image is built)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import structlog

from veri.core import egress, envs
from veri.core.episodes import RolloutStatus
from veri.core.harness import load_manifest
from veri.core.launch import LaunchResult, RolloutLaunch
from veri.services.launcher.errors import task_env_refused
from veri.services.launcher.outputs import enforce_output_cap
from veri.services.launcher.tails import Tail, drain

log = structlog.get_logger("veri.services.launcher.local")


class LocalBackend:
    name = "local"
    runtime: str | None = None  # no container: the harness runs as this user, on this kernel

    def __init__(self) -> None:
        self._warned: set[str] = set()

    async def run(self, launch: RolloutLaunch, output_dir: Path) -> LaunchResult:
        if launch.task_env is not None:
            return LaunchResult(rollout_id=launch.rollout_id, status=RolloutStatus.FAILED, started_at=time.time(),
                                infrastructure_error=task_env_refused(self.name), duration_s=0.0)
        bundle = Path(launch.image)
        manifest = load_manifest(bundle)
        if manifest.egress != egress.EGRESS_OPEN and manifest.name not in self._warned:
            self._warned.add(manifest.name)
            log.warning("egress not enforced: the local backend runs harnesses as plain processes (dev only); "
                        "the docker launcher enforces it", bundle=manifest.name, egress=manifest.egress)
        output_dir.mkdir(parents=True, exist_ok=True)
        started = time.time()
        with tempfile.TemporaryDirectory(prefix="veri-home-") as home:
            # This interpreter's bin first, so `python` has the SDKs; nothing else from the host env.
            path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "/usr/bin:/bin")])
            env = {**launch.env, envs.VERI_OUTPUT_DIR: str(output_dir), "PATH": path, "HOME": home}
            process = await asyncio.create_subprocess_exec(
                *manifest.entrypoint, cwd=bundle, env=env, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True,
            )
            assert process.stdout is not None and process.stderr is not None  # both PIPE
            stdout, stderr = Tail(launch.limits.log_tail_bytes), Tail(launch.limits.log_tail_bytes)
            readers = asyncio.gather(drain(process.stdout, stdout), drain(process.stderr, stderr))
            try:
                await asyncio.wait_for(process.wait(), timeout=launch.timeout_s)
                status = RolloutStatus.COMPLETED if process.returncode == 0 else RolloutStatus.FAILED
            except TimeoutError:
                os.killpg(process.pid, signal.SIGKILL)  # the whole process group: grandchildren too
                await process.wait()
                status = RolloutStatus.TRUNCATED
            except asyncio.CancelledError:  # the trainer stops: its own session, so no Ctrl-C reached it
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                readers.cancel()
                readers.add_done_callback(lambda done: done.cancelled() or done.exception())  # no log noise
                await process.wait()
                raise
            await readers
        truncated = enforce_output_cap(output_dir, launch.limits.output_max_bytes)
        return LaunchResult(
            rollout_id=launch.rollout_id, status=status,
            exit_code=None if status is RolloutStatus.TRUNCATED else process.returncode,
            stdout_tail=stdout.text(), stderr_tail=stderr.text(), output_dir=str(output_dir),
            output_truncated=truncated, started_at=started, duration_s=time.time() - started,
        )

    async def remove_leftovers(self) -> int:
        return 0  # plain processes carry no label to find leftovers by

    def close(self) -> None:
        pass  # holds nothing between rollouts
