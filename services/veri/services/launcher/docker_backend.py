"""`docker` backend: one gVisor (`runsc`) container per rollout, through the Docker SDK.

Each sandbox: the harness image's CMD (its bundle's entrypoint) as user 1000, from /harness; env exactly
the harness contract (`launch.env` + VERI_OUTPUT_DIR); the rollouts network only; read-only root with
tmpfs /tmp, /work and HOME; all capabilities dropped, no-new-privileges; memory, CPU, `ulimit nproc`
(gVisor refuses the fork past it: fork bombs end there) and a generous pids limit as a backstop (under
runsc it counts the sandbox's own threads too). Past the timeout the container is killed: every process
in it dies with it (status truncated).

Output: VERI_OUTPUT_DIR is a host folder bind-mounted into the sandbox — `output_dir` itself, so there is
nothing to copy after exit (gVisor keeps a tmpfs inside its own memory, where neither `docker cp` nor
anything else can read it once the sandbox is gone). A guard measures it while the harness runs: past
`output_max_bytes + tmpfs_mb` the sandbox is killed (failed). After exit it is capped at
`output_max_bytes` (files in name order, symlinks dropped: `output_truncated`).

Logs: the harness's stdout and stderr are appended to two files on a second bind mount (a `sh -c`
wrapper around the CMD, which writes the exit status there too) and their tails read from disk after
exit. Not through docker's log pipe: under runsc bursts through that pipe lose data, and it would cost a
streaming thread per rollout. The guard kills a sandbox whose logs pass LOG_CEILING_BYTES.

Cancellation (the trainer stopped, or its launcher request went away): wherever the rollout's task is
cancelled, its sandbox is removed before the cancellation goes on, even one that docker was still
creating in a pool thread when the cancel landed (`_create_or_discard`).

dockerd stopped or restarting (live-restore, `make docker`, keeps the sandboxes running meanwhile): a
docker call that cannot reach it is tried again with backoff for up to `dockerd_grace_s` (dockerd_watch.py; the waits on
running sandboxes reconnect the same way, and read the exit code of one that ended meanwhile); past that
the rollout ends `failed` with an `infrastructure_error` saying so (masked, never scored). A create
whose answer was lost is not repeated blind: the rollout's earlier attempt, if docker made it, is
removed first. The names a sandbox calls are pinned in its /etc/hosts (docker_hosts.py): docker's DNS
is down with dockerd.

Threads: every Docker SDK call blocks, so it runs in this backend's own thread pool (one long `wait` per
running sandbox plus short calls), sized from `max_sandboxes`, the cap on sandboxes alive at once.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import secrets
import shutil
import socket
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import structlog
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.types import LogConfig, Mount, Ulimit
from tenacity import AsyncRetrying, Retrying

from veri.core import egress, envs
from veri.core.episodes import RolloutStatus
from veri.core.harness import BUNDLE_MOUNT, HARNESS_UID, OUTPUT_MOUNT
from veri.core.launch import LaunchResult, RolloutLaunch, SandboxLimits
from veri.services.launcher.docker_egress import DockerEgress
from veri.services.launcher.docker_hosts import PinnedHosts
from veri.services.launcher.docker_task import run_task
from veri.services.launcher.dockerd_watch import DOCKERD_GRACE_S, DockerdWatch
from veri.services.launcher.errors import DockerdAway, EgressProblem, ImageProblem, SandboxUnavailable
from veri.services.launcher.outputs import enforce_output_cap, hand_back
from veri.services.launcher.sandbox_files import (
    ignore_outcome,
    logs_dir_of,
    output_ceiling,
    output_note,
    prepare_dirs,
    read_tails,
    recorded_exit,
    tree_size,
)

log = structlog.get_logger("veri.services.launcher.docker")

DEFAULT_NETWORK = "veri-rollouts"  # compose.yaml names its rollouts network so
HARNESS_USER = f"{HARNESS_UID}:{HARNESS_UID}"  # `harness` in veri/base
LOGS_MOUNT = "/veri/logs"
LOG_CEILING_BYTES = 2 << 30  # stdout + stderr on disk while running; past it the sandbox is killed
GUARD_INTERVAL_S = 0.5
MAX_STARTING = 8  # sandboxes being created or started at once (per event loop)
LABEL_SANDBOX = "veri.sandbox"
LABEL_LAUNCHER = "veri.launcher"
LABEL_ROLLOUT = "veri.rollout_id"
# >> so the host side may read while it writes. The harness's exit status is also written to a file:
# a sandbox that ends while dockerd is stopped can come back from live-restore as exit 255 (docker
# lost the status with its shim); the file has the real one. Needs /bin/sh in the image (every veri
# base has it).
LOST_EXIT = 255  # what docker reports for a sandbox whose exit status it lost
STDIO_WRAPPER = (f'"$@" >>{LOGS_MOUNT}/stdout 2>>{LOGS_MOUNT}/stderr; status=$?; '
                 f'echo "$status" >{LOGS_MOUNT}/exit; exit "$status"')


@dataclass(frozen=True)
class ImageSpec:
    command: list[str]
    home: str
    fetched: float
    egress: egress.Egress = egress.EGRESS_OPEN  # the bundle's (its image's label): which network, which pass


def rollouts_network_options() -> dict[str, Any]:
    """How the rollouts network should be made (for tests, benches and compose): internal (no route out
    of it) and no address of the host on its bridge, so a sandbox reaches the containers on that
    network (the proxy) and nothing on the host: not its ports, not other docker networks."""
    return {"driver": "bridge", "internal": True,
            "options": {"com.docker.network.bridge.inhibit_ipv4": "true"}}


def ensure_rollouts_network(client: docker.DockerClient, name: str) -> Any:
    """The named network, created with `rollouts_network_options` when missing. Tests and benches keep
    theirs (fixed names, never removed): dockerd 20.10 can leave a network's endpoint count off after
    many concurrent container removals, and such a network cannot be removed until dockerd restarts -
    fresh networks per run would eat docker's address pools."""
    try:
        return client.networks.get(name)
    except NotFound:
        pass
    try:
        return client.networks.create(name, check_duplicate=True, **rollouts_network_options())
    except APIError as exc:
        if exc.status_code != 409:  # someone else created it just now
            raise
        return client.networks.get(name)


class DockerBackend:
    name = "docker"

    def __init__(
        self,
        *,
        network: str | None = None,
        client: docker.DockerClient | None = None,
        unsafe_runc: bool = False,
        launcher_id: str = "default",
        max_sandboxes: int = 64,
        host_paths: dict[str, str] | None = None,
        dockerd_grace_s: float = DOCKERD_GRACE_S,
    ) -> None:
        """`network`: the rollouts network (default $VERI_ROLLOUTS_NETWORK, else veri-rollouts).
        `launcher_id` labels this launcher's sandboxes: `remove_leftovers` removes only those.
        `host_paths` maps folders as this process sees them to the host's (bind mounts name host
        paths); inside a container it is read from this container's own mounts when not given.
        `dockerd_grace_s`: how long a docker call retries a dockerd that does not answer."""
        network = network or os.environ.get(envs.VERI_ROLLOUTS_NETWORK) or DEFAULT_NETWORK
        self.network = network
        self.launcher_id = launcher_id
        self.max_sandboxes = max_sandboxes
        self.dockerd = DockerdWatch(dockerd_grace_s)
        self._unremoved: list[Any] = []  # sandboxes whose removal gave up on dockerd: removed on the next run
        self._pool = ThreadPoolExecutor(max_workers=2 * max_sandboxes + 8, thread_name_prefix="veri-docker")
        self._slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary())
        # Creating and starting a runsc sandbox is dockerd's heaviest call; 64 at once on a loaded box
        # left some waiting past the client's 120 s timeout (a launch failure). A few at a time instead.
        self._starting: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary())
        try:
            self.client = client or docker.from_env(timeout=120, max_pool_size=2 * max_sandboxes + 8)
            info = self.client.info()
        except DockerException as exc:
            raise SandboxUnavailable(f"no Docker daemon ({exc}): run `make docker`") from exc
        runtimes = info.get("Runtimes") or {}
        if unsafe_runc:
            self.runtime = "runc"
            log.warning("sandbox.unsafe_runc: harnesses run under runc, NOT gVisor - no isolation from the host "
                        "kernel, and ulimit nproc then counts every sandbox's uid-1000 processes together")
        elif "runsc" in runtimes:
            self.runtime = "runsc"
        else:
            raise SandboxUnavailable(
                f"dockerd has no runsc (gVisor) runtime (it has: {', '.join(sorted(runtimes)) or 'none'}): run "
                "`make docker`, which installs runsc and registers it in /etc/docker/daemon.json. Running "
                "harnesses without gVisor (sandbox.unsafe_runc: true) gives them the host kernel: never with "
                "code you do not trust."
            )
        try:
            net = self.client.networks.get(network)
        except NotFound:
            raise SandboxUnavailable(
                f"docker network {network!r} does not exist: start the stack (`make up` / docker compose "
                f"creates it), or create it: docker network create --internal "
                f"-o com.docker.network.bridge.inhibit_ipv4=true {network}"
            ) from None
        options = net.attrs.get("Options") or {}
        if net.attrs.get("Driver") == "bridge" and options.get("com.docker.network.bridge.inhibit_ipv4") != "true":
            log.warning("the host has an address on the rollouts network: sandboxes can reach ports this host "
                        "listens on unless a firewall blocks them", network=network)
        mounts = self._own_mounts() if host_paths is None else host_paths
        self.host_paths = {Path(k): Path(v) for k, v in mounts.items()}
        self._images: dict[str, ImageSpec] = {}
        self.egress = DockerEgress(self.client, network, launcher_id)
        self.hosts = PinnedHosts(self.client)
        # dockerd 20.10 sometimes leaves a network's endpoint count off when its containers are removed
        # concurrently (the network then cannot be removed until dockerd restarts); removing them one
        # at a time makes that much rarer (measured: 1 in 6 bursts of 64 instead of 1 in 2).
        self._removing = threading.Lock()

    # --- the SandboxBackend protocol ------------------------------------------------------------

    async def run(self, launch: RolloutLaunch, output_dir: Path) -> LaunchResult:
        started = time.time()
        loop = asyncio.get_running_loop()
        slots = self._slots.setdefault(loop, asyncio.Semaphore(self.max_sandboxes))
        async with slots:
            try:
                return await self._run(launch, Path(output_dir).absolute(), started)
            except asyncio.CancelledError:  # the sandbox is gone (_run); its logs folder goes too
                shutil.rmtree(logs_dir_of(Path(output_dir).absolute()), ignore_errors=True)
                raise
            except ImageNotFound:
                error = _missing_image(launch.image)
            except (ImageProblem, EgressProblem, DockerdAway) as exc:
                error = str(exc)
            except (DockerException, OSError) as exc:
                log.error("sandbox failed", rollout_id=launch.rollout_id, error=f"{type(exc).__name__}: {exc}")
                error = f"{type(exc).__name__}: {exc}"
            shutil.rmtree(logs_dir_of(Path(output_dir).absolute()), ignore_errors=True)
        return LaunchResult(rollout_id=launch.rollout_id, status=RolloutStatus.FAILED, infrastructure_error=error,
                            started_at=started, duration_s=time.time() - started)

    async def remove_leftovers(self) -> int:
        await self._docker(self.egress.remove_leftover_gateway)
        containers = await self._docker(self.client.containers.list, all=True,
                                        filters={"label": f"{LABEL_LAUNCHER}={self.launcher_id}"})
        for container in containers:
            await self._docker(self._remove, container)
        if containers:
            log.info("removed leftover sandboxes", count=len(containers), launcher=self.launcher_id)
        return len(containers)

    def close(self) -> None:
        self.egress.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()

    # --- one rollout ------------------------------------------------------------------------------

    async def _run(self, launch: RolloutLaunch, output_dir: Path, started: float) -> LaunchResult:
        limits = launch.limits
        while self._unremoved:
            stranded = self._unremoved.pop()
            try:
                await self._docker(self._remove, stranded)
            except DockerdAway:
                self._unremoved.append(stranded)
                raise
        if launch.task_env is not None:  # a Harbor task: its own image, then its verifier (docker_task.py)
            return await run_task(self, launch, output_dir, started)
        spec = await self._docker(self._image_spec, launch.image)
        logs_dir = logs_dir_of(output_dir)
        await self._call(prepare_dirs, output_dir, logs_dir)
        starting = self._starting_slot()
        async with starting:
            container = await self._create_or_discard(
                launch, functools.partial(self._create, launch, spec, output_dir, logs_dir))
        notes: list[str] = []
        exit_code: int | None = None
        guarded = False  # the guard killed it
        guard: asyncio.Future | None = None
        waiting: asyncio.Future | None = None
        try:
            async with starting:
                await self._docker(container.start)
            loop = asyncio.get_running_loop()
            wait = functools.partial(self._wait_exit, container, launch.timeout_s + 600)
            waiting = loop.run_in_executor(self._pool, wait)
            guard = asyncio.ensure_future(self._guard(output_dir, logs_dir, limits))
            done, _ = await asyncio.wait({waiting, guard}, timeout=launch.timeout_s,
                                         return_when=asyncio.FIRST_COMPLETED)
            if waiting in done:
                exit_code = int((await waiting)["StatusCode"])
                recorded = await self._call(recorded_exit, logs_dir) if exit_code == LOST_EXIT else None
                if recorded is not None and recorded != exit_code:
                    log.warning("sandbox.exit_status_lost", rollout_id=launch.rollout_id, docker=exit_code,
                                harness=recorded)  # dockerd restarted while the sandbox ended
                    exit_code = recorded
                status = RolloutStatus.COMPLETED if exit_code == 0 else RolloutStatus.FAILED
            else:
                await self._docker(self._kill, container)
                await waiting
                if guard in done:
                    status, guarded = RolloutStatus.FAILED, True
                    notes.append(guard.result())
                else:
                    status = RolloutStatus.TRUNCATED
                    notes.append(f"[veri] still running after timeout_s={launch.timeout_s:g}: the sandbox was killed")
            if status is RolloutStatus.FAILED and exit_code is not None:
                state = (await self._docker(self._state, container)) or {}
                if state.get("OOMKilled") or exit_code == 137:
                    notes.append(f"[veri] exit {exit_code}: killed — most likely the memory limit "
                                 f"({limits.memory_mb} MB, SandboxLimits.memory_mb)")
        finally:  # every way out, cancellation included: the sandbox must not outlive its rollout
            if guard is not None:
                guard.cancel()
            if waiting is not None and not waiting.done():
                waiting.add_done_callback(ignore_outcome)  # ends once the container is gone
            try:
                await asyncio.shield(self._docker(self._remove, container))
            except DockerdAway:
                self._unremoved.append(container)
                raise
        stdout, stderr = await self._call(read_tails, logs_dir, limits.log_tail_bytes)
        await self._call(shutil.rmtree, logs_dir, True)
        ceiling = output_ceiling(limits)
        if not guarded:
            size = await self._call(tree_size, output_dir)
            if size > ceiling:  # it finished before the guard saw it: the same verdict either way
                status = RolloutStatus.FAILED
                notes.append(output_note(size, ceiling))
        truncated = await self._call(enforce_output_cap, output_dir, limits.output_max_bytes)
        await self._call(hand_back, output_dir)  # to the services' user: the trainer reads it
        if status is RolloutStatus.FAILED and exit_code == 1 and not stderr.strip() and not notes:
            # Under gVisor a harness out of memory often gets a MemoryError with no memory left to print
            # it: exit 1, empty stderr, OOMKilled false. Say it may be that rather than nothing.
            notes.append(f"[veri] exit 1 with nothing on stderr: a harness that runs out of memory can end this way "
                         f"(a MemoryError it had no memory left to print); the memory limit was {limits.memory_mb} MB "
                         f"(SandboxLimits.memory_mb)")
        if notes:
            stderr = (stderr + "\n" if stderr else "") + "\n".join(notes)
        return LaunchResult(
            rollout_id=launch.rollout_id, status=status,
            exit_code=None if status is RolloutStatus.TRUNCATED else exit_code,
            stdout_tail=stdout, stderr_tail=stderr, output_dir=str(output_dir), output_truncated=truncated,
            started_at=started, duration_s=time.time() - started,
        )

    def _starting_slot(self) -> asyncio.Semaphore:
        """The cap on sandboxes being created or started at once (per event loop)."""
        return self._starting.setdefault(asyncio.get_running_loop(), asyncio.Semaphore(MAX_STARTING))

    async def _create_or_discard(self, launch: RolloutLaunch, make: Callable[[], Any]) -> Any:
        """`make()` (a container create) in the pool. A pool thread cannot be stopped: when this task is cancelled while
        docker creates the container, whichever side comes second (this task or the thread) removes it.
        Tried again while dockerd does not answer: an earlier try docker may have made is removed first."""
        handover = threading.Lock()
        made: list[Any] = []
        abandoned = False
        tries = 0

        def create() -> Any:
            nonlocal tries
            tries += 1
            if tries > 1:
                self._remove_rollout(launch.rollout_id)
            container = make()
            with handover:
                keep = not abandoned
                if keep:
                    made.append(container)
            if not keep:
                self._remove(container)
            return container

        try:
            return await self._docker(create)
        except asyncio.CancelledError:
            with handover:
                abandoned = True
            if made:
                await asyncio.shield(self._call(self._remove, made[0]))
            raise

    async def _guard(self, output_dir: Path, logs_dir: Path, limits: SandboxLimits) -> str:
        """Returns (ending the wait) when the sandbox's files on the host pass their ceilings."""
        ceiling = output_ceiling(limits)
        while True:
            await asyncio.sleep(GUARD_INTERVAL_S)
            size = await self._call(tree_size, output_dir)
            if size > ceiling:
                return output_note(size, ceiling)
            logged = await self._call(tree_size, logs_dir)
            if logged > LOG_CEILING_BYTES:
                return f"[veri] stdout + stderr passed {LOG_CEILING_BYTES >> 20} MiB: the sandbox was killed"

    def _labels(self, launch: RolloutLaunch) -> dict[str, str]:
        labels = {f"veri.{key}": str(value) for key, value in launch.labels.items()}
        labels.update({LABEL_SANDBOX: "1", LABEL_LAUNCHER: self.launcher_id, LABEL_ROLLOUT: launch.rollout_id})
        return labels

    def _create(self, launch: RolloutLaunch, spec: ImageSpec, output_dir: Path, logs_dir: Path) -> Any:
        limits = launch.limits
        size = f"size={limits.tmpfs_mb}m"
        owned = f"uid={HARNESS_UID},gid={HARNESS_UID}"
        tmpfs = {"/tmp": f"{size},mode=1777", "/work": f"{size},{owned},mode=0755"}
        if spec.home not in tmpfs:
            tmpfs[spec.home] = f"{size},{owned},mode=0700"
        labels = self._labels(launch)
        network, egress_env = self.egress.sandbox(spec.egress, launch.env)
        env = {**launch.env, **egress_env, envs.VERI_OUTPUT_DIR: OUTPUT_MOUNT}
        pinned = self.hosts.for_sandbox(network, env)
        return self.client.containers.create(
            launch.image,
            command=["/bin/sh", "-c", STDIO_WRAPPER, "veri-harness", *spec.command],
            name=f"veri-{re.sub(r'[^A-Za-z0-9_.-]', '-', launch.rollout_id)[:48]}-{secrets.token_hex(3)}",
            environment=env,
            user=HARNESS_USER,
            working_dir=BUNDLE_MOUNT,
            runtime=self.runtime,
            network_mode=network,
            extra_hosts=pinned or None,
            read_only=True,
            tmpfs=tmpfs,
            mounts=[Mount(OUTPUT_MOUNT, self._host_path(output_dir), type="bind"),
                    Mount(LOGS_MOUNT, self._host_path(logs_dir), type="bind")],
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            mem_limit=f"{limits.memory_mb}m",
            memswap_limit=f"{limits.memory_mb}m",
            nano_cpus=int(limits.cpus * 1e9),
            pids_limit=limits.pids_limit,
            ulimits=[Ulimit(name="nproc", soft=limits.nproc, hard=limits.nproc)],
            labels=labels,
            log_config=LogConfig(type="none"),
            stdin_open=False,
            detach=True,
        )

    # --- docker helpers (blocking: run through _call) --------------------------------------------

    async def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    async def _docker(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """`_call` for a docker call: while dockerd does not answer, tried again with backoff for up to
        `dockerd_grace_s` (dockerd_watch.py), then DockerdAway."""
        answer: Any = await AsyncRetrying(**self.dockerd.policy())(self._call, fn, *args, **kwargs)
        self.dockerd.answered()
        return answer

    def _wait_exit(self, container: Any, timeout: float) -> dict[str, Any]:
        """`container.wait` (blocking), reconnecting while dockerd is away: a sandbox that ended
        meanwhile is answered with its exit code once dockerd has taken it back."""
        deadline = time.monotonic() + timeout

        def wait() -> dict[str, Any]:
            answer: dict[str, Any] = container.wait(timeout=max(1.0, deadline - time.monotonic()))
            return answer

        answer = Retrying(**self.dockerd.policy())(wait)
        self.dockerd.answered()
        return answer

    def _image_spec(self, image: str) -> ImageSpec:
        cached = self._images.get(image)
        if cached and time.monotonic() - cached.fetched < 60:
            return cached
        try:
            config = self.client.images.get(image).attrs.get("Config") or {}
        except ImageNotFound:
            raise ImageProblem(_missing_image(image)) from None
        command = config.get("Cmd") or []
        if not command:
            raise ImageProblem(f"image {image!r} has no CMD (the bundle's entrypoint): build harness images "
                               "with `veri harness build BUNDLE`")
        env = dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)
        try:
            policy = egress.from_label((config.get("Labels") or {}).get(egress.LABEL_EGRESS))
        except egress.EgressError as exc:
            raise ImageProblem(f"image {image!r}: {exc}") from None
        spec = ImageSpec(command=list(command), home=env.get("HOME") or "/home/harness", fetched=time.monotonic(),
                         egress=policy)
        self._images[image] = spec
        return spec

    def _kill(self, container: Any) -> None:
        try:
            container.kill()
        except APIError as exc:  # it ended on its own in the meantime
            if exc.status_code not in (404, 409):
                raise

    def _state(self, container: Any) -> dict[str, Any] | None:
        try:
            container.reload()
            return container.attrs.get("State")
        except NotFound:
            return None

    def _remove_rollout(self, rollout_id: str) -> None:
        """Every container of this launcher for `rollout_id` (an earlier create whose answer was lost)."""
        labels = [f"{LABEL_LAUNCHER}={self.launcher_id}", f"{LABEL_ROLLOUT}={rollout_id}"]
        # sparse: no inspect per listed container, which raises NotFound for one removed meanwhile
        for container in self.client.containers.list(all=True, filters={"label": labels}, sparse=True):
            self._remove(container)

    def _remove(self, container: Any) -> None:
        try:
            with self._removing:
                container.remove(force=True)
        except NotFound:
            pass
        except APIError as exc:
            if exc.status_code != 409:  # 409: removal already in progress
                raise

    def _host_path(self, path: Path) -> str:
        for inner, outer in self.host_paths.items():
            if path.is_relative_to(inner):
                return str(outer / path.relative_to(inner))
        return str(path)

    def _own_mounts(self) -> dict[str, str]:
        """Inside a container, bind mounts must name host paths: map this container's own mounts."""
        if not Path("/.dockerenv").exists():
            return {}
        try:
            me = self.client.containers.get(socket.gethostname())
        except DockerException:
            log.info("running in a container that is not this docker's (or hostname is not its id): "
                        "output folders are bind-mounted by the same path on the host")
            return {}
        return {m["Destination"]: m["Source"] for m in me.attrs.get("Mounts") or []
                if m.get("Source") and m.get("Destination")}


def _missing_image(image: str) -> str:
    return f"image {image!r} is not on this machine: build it with `veri harness build BUNDLE`"
