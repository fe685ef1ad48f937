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
import io
import os
import re
import secrets
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
from docker.errors import APIError, ImageNotFound, NotFound
from docker.types import LogConfig, Mount, Ulimit

from veri.core import egress, envs
from veri.core.episodes import RolloutStatus
from veri.core.harness import OUTPUT_MOUNT
from veri.core.launch import LaunchResult, RolloutLaunch, TaskEnvironment, TaskHealthcheck, VerifierResult
from veri.core.rules import VerifierError
from veri.services.launcher import task_sandbox, verifier
from veri.services.launcher.docker_exec import PrivilegedExec
from veri.services.launcher.errors import ImageProblem
from veri.services.launcher.outputs import enforce_output_cap, hand_back, prepare_output
from veri.services.launcher.tails import Tail
from veri.services.launcher.task_runtime.layout import RUNTIME_MOUNT

if TYPE_CHECKING:
    from veri.services.launcher.docker_backend import DockerBackend

log = structlog.get_logger("veri.services.launcher.docker_task")

VERIFIER_GRACE_S = 120.0  # mounts, unpacking and printing, beyond test.sh's timeout
TESTS_TAR_MAX = 256 << 20


@dataclass(frozen=True)
class TaskImage:
    workdir: str
    path: str | None  # the image's PATH
    user: str | None  # the image's USER (its user part), the agent's and the verifier's when the task names none


@dataclass
class AgentTurn:
    exit_code: int | None = None
    timed_out: bool = False
    error: str | None = None  # the sandbox could not start the agent (the task's fault, named)
    pid: int | None = None


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
    tests = await backend._call(_tests_tar, Path(task.tests_dir))
    await backend._call(_prepare_output, output_dir)
    network, egress_env = await backend._docker(backend.egress.sandbox, policy, launch.env)
    contract = {**launch.env, **egress_env, envs.VERI_OUTPUT_DIR: OUTPUT_MOUNT}
    pinned = await backend._docker(backend.hosts.for_sandbox, network, contract)

    def create() -> Any:
        return _create(backend, launch, task, network, pinned, output_dir, limits)

    async with backend._starting_slot():
        container = await backend._create_or_discard(launch, create)
    turn = AgentTurn()
    verified: VerifierResult | None = None
    tails = ("", "")
    try:
        await backend._docker(container.start)
        unready = None
        if task.healthcheck is not None:
            unready = await backend._call(_wait_healthy, backend.client, container.id, task.healthcheck, image.workdir)
        if unready:
            turn.error = unready
        else:
            turn = await _agent_turn(backend, container, task, launch, image, contract, output_dir, limits)
            tails = await backend._call(_agent_tails, backend.client, container.id, limits.log_tail_bytes)
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
    stdout, stderr = tails
    if turn.timed_out:
        status = RolloutStatus.TRUNCATED
        limit = task_sandbox.agent_timeout(task, launch.timeout_s)
        stderr += (f"\n[veri] still running after the agent's timeout ({limit:g} s): its processes were killed; "
                   "the task was verified as it was left")
    elif turn.error:
        status = RolloutStatus.FAILED
    else:
        status = RolloutStatus.COMPLETED if turn.exit_code == 0 else RolloutStatus.FAILED
    return LaunchResult(
        rollout_id=launch.rollout_id, status=status,
        exit_code=None if status is RolloutStatus.TRUNCATED else turn.exit_code,
        stdout_tail=stdout, stderr_tail=stderr.lstrip("\n"), output_dir=str(output_dir), output_truncated=truncated,
        infrastructure_error=turn.error, started_at=started, duration_s=time.time() - started, verifier=verified,
    )


# --- the sandbox (blocking) ------------------------------------------------------------------------

def _task_image(client: Any, task: TaskEnvironment) -> TaskImage:
    try:
        config = client.images.get(task.image).attrs.get("Config") or {}
    except ImageNotFound:
        raise ImageProblem(f"the task's image {task.image!r} is not on this machine: build it with "
                           "`veri tasks build TASK_DIR` (or map its FROM with --image-map)") from None
    env = dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)
    user = (config.get("User") or "").split(":", 1)[0] or None
    return TaskImage(workdir=task.workdir or config.get("WorkingDir") or "/", path=env.get("PATH"), user=user)


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


def _tests_tar(tests_dir: Path) -> bytes:
    if not (tests_dir / "test.sh").is_file():
        raise ImageProblem(f"the task's tests folder {tests_dir} has no test.sh: a Harbor task's tests/test.sh "
                           "runs after the agent and writes /logs/verifier/reward.txt")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        archive.add(tests_dir, arcname=".", filter=_owned_by_root)
    if buffer.tell() > TESTS_TAR_MAX:
        raise ImageProblem(f"the task's tests folder {tests_dir} is over {TESTS_TAR_MAX >> 20} MiB")
    return buffer.getvalue()


def _solution_tar(solution_dir: Path) -> bytes:
    if not (solution_dir / "solve.sh").is_file():
        raise ImageProblem(f"the task's solution folder {solution_dir} has no solve.sh (the oracle runs it)")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        archive.add(solution_dir, arcname=".", filter=_owned_by_root)
    return buffer.getvalue()


def _owned_by_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


# --- the agent's turn ------------------------------------------------------------------------------

async def _agent_turn(backend: DockerBackend, container: Any, task: TaskEnvironment, launch: RolloutLaunch,
                      image: TaskImage, contract: dict[str, str], output_dir: Path, limits: Any) -> AgentTurn:
    nonce = secrets.token_hex(16)
    timeout_s = task_sandbox.agent_timeout(task, launch.timeout_s)
    stdin = await backend._call(_solution_tar, Path(task.solution_dir or "")) if task.agent == "oracle" else b""
    env = task_sandbox.agent_env(task, contract, image.path)
    command = task_sandbox.agent_command(task, nonce, image.workdir, task.agent_user or image.user)
    agent = await backend._docker(PrivilegedExec, backend.client, container.id, command, env=env, stdin=stdin)
    # the whole exit line (a frame may end inside it), or the error line of a sandbox that could not start it
    ended = re.compile(rf"^==veri:{nonce}:(exit== [0-9]+|error== .*)\n".encode(), re.MULTILINE)
    deadline = time.monotonic() + timeout_s  # the agent's time starts with its exec
    reading = asyncio.ensure_future(backend._call(agent.read, deadline, ended))
    guard = asyncio.ensure_future(backend._guard(output_dir, output_dir, limits))
    try:
        done, _ = await asyncio.wait({reading, guard}, return_when=asyncio.FIRST_COMPLETED)
        turn = _read_turn(agent.output.stdout.decode(errors="replace"), nonce)
        if turn.exit_code is None and turn.error is None and agent.output.ended:
            said = agent.output.stderr.decode(errors="replace").strip()[-500:] or "nothing on stderr"
            turn.error = (f"the agent's exec ended before the agent did ({said}): the task image needs sh, unshare "
                          "and setpriv (util-linux; busybox has no setpriv)")
        elif turn.exit_code is None and turn.error is None:  # past its timeout, or the output guard fired
            if turn.pid is not None:  # the exec's first process: --kill-child takes the namespace with it
                await backend._docker(_run_plain, backend.client, container.id, task_sandbox.kill_command(turn.pid))
            await reading  # the exec ends with its processes
            if guard in done:
                turn.error = guard.result()
            else:
                turn.timed_out = True
    finally:
        guard.cancel()
        if not reading.done():
            reading.add_done_callback(lambda future: future.cancelled() or future.exception())
        await backend._call(agent.close)
    return turn


def _read_turn(stdout: str, nonce: str) -> AgentTurn:
    sections = verifier.Sections.parse(stdout, nonce)
    turn = AgentTurn()
    # The first pid line only: it is printed before the agent runs. The agent can see its namespace's
    # PID 1 (and the nonce on its command line) and write to that process's stdout; a later line is its.
    pid = re.search(rf"^==veri:{re.escape(nonce)}:pid== (\d+)$", stdout, re.MULTILINE)
    turn.pid = int(pid[1]) if pid else None
    if "error" in sections.parts:
        turn.error = f"the task's sandbox could not start the agent: {sections.parts['error'].strip()}"
    exit_text = sections.parts.get("exit", "").strip().split("\n")[0]
    if exit_text.isdigit():
        turn.exit_code = int(exit_text)
    return turn


def _wait_healthy(client: Any, container_id: str, check: TaskHealthcheck, workdir: str) -> str | None:
    """Runs the task's healthcheck until it passes (None) or fails `retries` times in a row after its start
    period (why, naming the task's fault). Root without capabilities, in the sandbox's first namespace:
    only the task's ENTRYPOINT runs there yet."""
    started = time.monotonic()
    failures, last = 0, ""
    while True:
        runner = PrivilegedExec(client, container_id, ["sh", "-c", check.command], env={}, privileged=False,
                                workdir=workdir)
        try:
            output = runner.read(time.monotonic() + check.timeout_s)
            code = None if output.timed_out else runner.exit_code()
        finally:
            runner.close()
        if code == 0:
            return None
        said = (output.stdout + output.stderr).decode(errors="replace").strip()[-300:]
        last = f"timed out after {check.timeout_s:g} s" if code is None else f"exit {code}: {said or 'no output'}"
        starting = time.monotonic() - started < check.start_period_s
        if not starting:
            failures += 1
            if failures >= check.retries:
                return (f"the task's healthcheck did not pass ({check.retries} tries after its start period; the "
                        f"last: {last}): fix the task's [environment.healthcheck] or its image")
        time.sleep(check.start_interval_s if starting else check.interval_s)


def _run_plain(client: Any, container_id: str, command: list[str]) -> bytes:
    """A short exec as root in the first PID namespace (privileged: signals reach any process there)."""
    runner = PrivilegedExec(client, container_id, command, env={})
    try:
        output = runner.read(time.monotonic() + 60)
        return bytes(output.stdout)
    finally:
        runner.close()


def _agent_tails(client: Any, container_id: str, limit: int) -> tuple[str, str]:
    """The harness's stdout and stderr tails (the agent's own files: only logs are read from there)."""
    found = []
    for name in ("stdout", "stderr"):
        path = f"{task_sandbox.AGENT_LOGS}/{name}"
        script = f'[ -f {path} ] && [ ! -L {path} ] && wc -c <{path} && tail -c {limit} {path}'
        runner = PrivilegedExec(client, container_id, ["sh", "-c", script], env={})
        try:
            data = bytes(runner.read(time.monotonic() + 60).stdout)
        finally:
            runner.close()
        size_line, _, chunk = data.partition(b"\n")
        tail = Tail(limit)
        size = int(size_line) if size_line.strip().isdigit() else len(chunk)
        tail.total = max(0, size - len(chunk))
        tail.feed(chunk)
        found.append(tail.text())
    return found[0], found[1]


# --- the verifier (blocking) -----------------------------------------------------------------------

def _verify(backend: DockerBackend, container: Any, task: TaskEnvironment, image: TaskImage,
            tests: bytes) -> VerifierResult:
    started = time.monotonic()
    offline = _take_offline(backend.client, container)
    if offline:
        return VerifierResult(error=VerifierError.ERROR, message=offline)
    nonce = secrets.token_hex(16)
    own_tools = bool(task.runtime_tree) and os.access(Path(task.runtime_tree or "") / "bin" / "setpriv", os.X_OK)
    setup_path = f"{RUNTIME_MOUNT}/bin:{verifier.SYSTEM_PATH}" if own_tools else verifier.SYSTEM_PATH
    env = {**verifier.tools_env(bool(task.tools_dir), bool(task.runtime_tree)), **task.verifier_env,
           "PATH": verifier.path_for_tests(image.path, task.env, task.verifier_env, bool(task.tools_dir))}
    command = verifier.command(nonce, image.workdir, task.verifier_timeout_s, task.verifier_user or image.user,
                               setup_path)
    runner = PrivilegedExec(backend.client, container.id, command, env=env, stdin=tests)
    try:
        output = runner.read(time.monotonic() + task.verifier_timeout_s + VERIFIER_GRACE_S)
    finally:
        runner.close()
    duration = time.monotonic() - started
    if output.timed_out:
        return VerifierResult(error=VerifierError.TIMEOUT, duration_s=duration, message=(
            f"the verifier did not finish within {task.verifier_timeout_s:g} s (+{VERIFIER_GRACE_S:g} s): its "
            "sandbox was removed"))
    return verifier.result(output.stdout.decode(errors="replace"), output.stderr.decode(errors="replace"), nonce,
                           task.verifier_timeout_s, duration)


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
