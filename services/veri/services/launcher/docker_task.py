"""One Harbor-task rollout on the docker backend: the task's sandbox (task_sandbox.py), the agent's turn,
then the verifier (verifier.py), then the sandbox removed. `DockerBackend._run` hands a launch with a
`task_env` here; everything docker-specific it shares (retries while dockerd is away, removal,
cancellation, egress, pinned hosts) is the backend's own.

Order: create and start the sandbox; the task's healthcheck, when it has one (a plain exec, no
capabilities; failing it fails the rollout, the task's fault named); the agent's exec (its exit line,
or the timeout: then its whole PID namespace is killed and the rollout is `truncated`, and still
verified); the harness's log tails;
every network taken off the sandbox (the verifier runs offline; what the agent left running loses its
network too); the verifier's exec; the sandbox removed whatever happened. The agent's and the
verifier's users are the task's, else the image's USER, else root.
"""

from __future__ import annotations

import asyncio
import functools
import re
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
from docker.errors import APIError, ImageNotFound, NotFound
from docker.types import LogConfig, Mount, Ulimit

from veri.core import egress, envs
from veri.core.harness import OUTPUT_MOUNT
from veri.core.launch import LaunchResult, RolloutLaunch, TaskEnvironment, TaskImageConfig, VerifierResult
from veri.core.rules import VerifierError
from veri.services.launcher import task_sandbox, task_steps
from veri.services.launcher.docker_exec import PrivilegedExec
from veri.services.launcher.errors import ImageProblem
from veri.services.launcher.outputs import enforce_output_cap, hand_back, prepare_output
from veri.services.launcher.task_steps import AgentTurn, TaskImage

if TYPE_CHECKING:
    from veri.services.launcher.docker_backend import DockerBackend

log = structlog.get_logger("veri.services.launcher.docker_task")


async def run_task(backend: DockerBackend, launch: RolloutLaunch, output_dir: Path, started: float) -> LaunchResult:
    task = launch.task_env
    assert task is not None
    image = await backend._docker(_task_image, backend.client, task)
    bundle = await backend._docker(_bundle_egress, backend, launch.image, task.agent)
    policy = task_sandbox.stricter(bundle, task.egress())
    limits = task_sandbox.resources(task, launch.limits)
    if task.storage_mb is not None:
        log.info("task.storage_not_enforced", rollout_id=launch.rollout_id, storage_mb=task.storage_mb,
                 why="the docker backend cannot cap a runsc sandbox's writable layer")
    tests = await backend._call(task_steps.tests_tar, Path(task.tests_dir))
    await backend._call(_prepare_output, output_dir)
    network, egress_env = await backend._docker(backend.egress.sandbox, policy, launch.env)
    contract = {**launch.env, **egress_env, envs.VERI_OUTPUT_DIR: OUTPUT_MOUNT}
    pinned = await backend._docker(backend.hosts.for_sandbox, network, contract)

    def create() -> Any:
        return _create(backend, launch, task, network, pinned, output_dir, limits)

    async with backend._starting_slot():
        container = await backend._create_or_discard(launch, create)
    open_exec = functools.partial(PrivilegedExec, backend.client, container.id)
    turn = AgentTurn()
    verified: VerifierResult | None = None
    tails = ("", "")
    try:
        await backend._docker(container.start)
        unready = None
        if task.healthcheck is not None:
            unready = await backend._call(task_steps.wait_healthy, open_exec, task.healthcheck, image.workdir)
        if unready:
            turn.error = unready
        else:
            turn = await task_steps.agent_turn(backend._docker, open_exec, task, launch, image, contract,
                                               guard=lambda: backend._guard(output_dir, output_dir, limits))
            tails = await backend._call(task_steps.agent_tails, open_exec, limits.log_tail_bytes)
        if turn.error is None:
            verified = await backend._call(_verify, backend, container, task, image, tests)
    finally:
        try:
            await asyncio.shield(backend._docker(backend._remove, container))
        except Exception:
            backend._unremoved.append(container)
            raise
    truncated = await backend._call(enforce_output_cap, output_dir, limits.output_max_bytes)
    await backend._call(hand_back, output_dir)
    return task_steps.launch_result(launch, turn, tails, verified, output_dir, truncated, started)


# --- the sandbox (blocking) ------------------------------------------------------------------------

def _task_image(client: Any, task: TaskEnvironment) -> TaskImage:
    """The image's config as the job's start read it, else from this Docker (a launch made by hand)."""
    if task.image_config is not None:
        return TaskImage.of(task, task.image_config)
    try:
        config = client.images.get(task.image).attrs.get("Config") or {}
    except ImageNotFound:
        raise ImageProblem(f"the task's image {task.image!r} is not on this machine: build it with "
                           "`veri tasks build TASK_DIR` (or map its FROM with --image-map)") from None
    return TaskImage.of(task, TaskImageConfig.of(config))


def _bundle_egress(backend: DockerBackend, image: str, agent: str) -> egress.Egress:
    """The bundle's egress (its image's label); for oracle and nop, whose launch image need not be a
    bundle's: the label when there is one, else open (the task's own ask then decides)."""
    if agent == "harness":
        return backend._image_spec(image).egress
    try:
        return backend._image_spec(image).egress
    except ImageProblem:
        return egress.EGRESS_OPEN


def _create(backend: DockerBackend, launch: RolloutLaunch, task: TaskEnvironment, network: str, pinned: Any,
            output_dir: Path, limits: Any) -> Any:
    labels = backend._labels(launch)
    mounts = [Mount(**spec) for spec in task_sandbox.mounts(task)]
    for mount in mounts:
        if mount["Type"] == "bind":
            mount["Source"] = backend._host_path(Path(mount["Source"]))
    mounts.append(Mount(OUTPUT_MOUNT, backend._host_path(output_dir), type="bind"))
    return backend.client.containers.create(
        task.image,
        command=["sh", "-c", "sleep infinity"],  # the image's ENTRYPOINT is kept (it may start the task's services)
        name=f"veri-task-{re.sub(r'[^A-Za-z0-9_.-]', '-', launch.rollout_id)[:43]}-{secrets.token_hex(3)}",
        environment=dict(task.env),
        user="0",
        working_dir=task.workdir,
        runtime=backend.runtime,
        network_mode=network,
        extra_hosts=pinned or None,
        mounts=mounts,
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        mem_limit=f"{limits.memory_mb}m",
        memswap_limit=f"{limits.memory_mb}m",
        nano_cpus=int(limits.cpus * 1e9),
        pids_limit=limits.pids_limit,
        ulimits=[Ulimit(name="nproc", soft=limits.nproc, hard=limits.nproc)],
        labels=labels,
        log_config=LogConfig(type="none"),
        detach=True,
    )


def _prepare_output(output_dir: Path) -> None:
    prepare_output(output_dir)
    output_dir.chmod(0o777)  # the task's agent user may be any uid (root without capabilities among them)


# --- the verifier (blocking) -----------------------------------------------------------------------

def _verify(backend: DockerBackend, container: Any, task: TaskEnvironment, image: TaskImage,
            tests: bytes) -> VerifierResult:
    offline = _take_offline(backend.client, container)
    if offline:
        return VerifierResult(error=VerifierError.ERROR, message=offline)
    return task_steps.verify(functools.partial(PrivilegedExec, backend.client, container.id), task, image, tests)


def _take_offline(client: Any, container: Any) -> str:
    """Every network off the sandbox ('' when done, else why not): the verifier runs offline."""
    container.reload()
    for name in list((container.attrs.get("NetworkSettings") or {}).get("Networks") or {}):
        try:
            client.networks.get(name).disconnect(container, force=True)
        except NotFound:
            continue
        except APIError as exc:
            return f"the sandbox could not be taken off network {name} before the verifier ({exc})"
    return ""
