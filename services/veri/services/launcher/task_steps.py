"""The steps of a Harbor task's rollout that are the same on every backend that runs one (docker_task.py,
kubernetes/task_run.py): the tests' and the solution's tars, the healthcheck, the agent's turn, the
harness's log tails, the verifier, and the LaunchResult. Each runs its commands through an `Opener`: a
privileged exec into the task's sandbox as root (docker: docker_exec.PrivilegedExec; Kubernetes: the
API's exec, kubernetes/pod_exec.py). What those commands do and why: task_sandbox.py and verifier.py.
"""

from __future__ import annotations

import asyncio
import io
import os
import re
import secrets
import tarfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from veri.core.episodes import RolloutStatus
from veri.core.launch import (
    LaunchResult,
    RolloutLaunch,
    TaskEnvironment,
    TaskHealthcheck,
    TaskImageConfig,
    VerifierResult,
)
from veri.core.rules import VerifierError
from veri.services.launcher import task_sandbox, verifier
from veri.services.launcher.docker_exec import ExecOutput
from veri.services.launcher.errors import ImageProblem
from veri.services.launcher.tails import Tail
from veri.services.launcher.task_runtime.layout import RUNTIME_MOUNT

VERIFIER_GRACE_S = 120.0  # mounts, unpacking and printing, beyond test.sh's timeout
TESTS_TAR_MAX = 256 << 20


class Exec(Protocol):
    """One running exec in the task's sandbox (blocking)."""

    output: ExecOutput

    def read(self, deadline: float, until: re.Pattern[bytes] | None = None) -> ExecOutput: ...

    def exit_code(self, wait_s: float = 2.0) -> int | None: ...

    def close(self) -> None: ...


class Opener(Protocol):
    """Starts an exec as root: privileged (every capability the sandbox allows) or with none; `env` on top of
    the sandbox's own; `stdin` piped in, then closed."""

    def __call__(self, command: list[str], *, env: dict[str, str], stdin: bytes = b"", privileged: bool = True,
                 workdir: str | None = None) -> Exec: ...


@dataclass(frozen=True)
class TaskImage:
    workdir: str
    path: str | None  # the image's PATH
    user: str | None  # the image's USER (its user part), the agent's and the verifier's when the task names none

    @classmethod
    def of(cls, task: TaskEnvironment, config: TaskImageConfig) -> TaskImage:
        """The task's own workdir over the image's."""
        return cls(workdir=task.workdir or config.workdir or "/", path=config.path, user=config.user)


@dataclass
class AgentTurn:
    exit_code: int | None = None
    timed_out: bool = False
    error: str | None = None  # the sandbox could not start the agent (the task's fault, named)
    pid: int | None = None


# --- the task's folders ------------------------------------------------------------------------------

def tests_tar(tests_dir: Path) -> bytes:
    if not (tests_dir / "test.sh").is_file():
        raise ImageProblem(f"the task's tests folder {tests_dir} has no test.sh: a Harbor task's tests/test.sh "
                           "runs after the agent and writes /logs/verifier/reward.txt")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        archive.add(tests_dir, arcname=".", filter=_owned_by_root)
    if buffer.tell() > TESTS_TAR_MAX:
        raise ImageProblem(f"the task's tests folder {tests_dir} is over {TESTS_TAR_MAX >> 20} MiB")
    return buffer.getvalue()


def solution_tar(solution_dir: Path) -> bytes:
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

Call = Callable[..., Awaitable[Any]]  # runs a blocking function in the backend's pool


async def agent_turn(call: Call, open_exec: Opener, task: TaskEnvironment, launch: RolloutLaunch,
                     image: TaskImage, contract: dict[str, str],
                     guard: Callable[[], Awaitable[str]] | None = None) -> AgentTurn:
    """The agent's exec, read until its exit line or its timeout (then its whole namespace is killed).
    `call` runs each blocking step in the backend's pool; `guard`, when given, ends the turn early with its
    note (the docker backend's output ceiling)."""
    nonce = secrets.token_hex(16)
    timeout_s = task_sandbox.agent_timeout(task, launch.timeout_s)
    stdin = await call(solution_tar, Path(task.solution_dir or "")) if task.agent == "oracle" else b""
    env = task_sandbox.agent_env(task, contract, image.path)
    command = task_sandbox.agent_command(task, nonce, image.workdir, task.agent_user or image.user)
    agent: Exec = await call(open_exec, command, env=env, stdin=stdin)
    # the whole exit line (a frame may end inside it), or the error line of a sandbox that could not start it
    ended = re.compile(rf"^==veri:{nonce}:(exit== [0-9]+|error== .*)\n".encode(), re.MULTILINE)
    deadline = time.monotonic() + timeout_s  # the agent's time starts with its exec
    reading = asyncio.ensure_future(call(agent.read, deadline, ended))
    guarding: asyncio.Future[str] = asyncio.ensure_future(guard() if guard is not None else _never())
    try:
        done, _ = await asyncio.wait({reading, guarding}, return_when=asyncio.FIRST_COMPLETED)
        turn = read_turn(agent.output.stdout.decode(errors="replace"), nonce)
        if turn.exit_code is None and turn.error is None and agent.output.ended:
            said = agent.output.stderr.decode(errors="replace").strip()[-500:] or "nothing on stderr"
            turn.error = (f"the agent's exec ended before the agent did ({said}): the task image needs sh, unshare "
                          "and setpriv (util-linux; busybox has no setpriv)")
        elif turn.exit_code is None and turn.error is None:  # past its timeout, or the guard fired
            if turn.pid is not None:  # the exec's first process: --kill-child takes the namespace with it
                await call(run_plain, open_exec, task_sandbox.kill_command(turn.pid))
            await reading  # the exec ends with its processes
            if guarding in done:
                turn.error = guarding.result()
            else:
                turn.timed_out = True
    finally:
        guarding.cancel()
        if not reading.done():
            reading.add_done_callback(lambda future: future.cancelled() or future.exception())
        await call(agent.close)
    return turn


async def _never() -> str:
    await asyncio.Event().wait()
    return ""


def read_turn(stdout: str, nonce: str) -> AgentTurn:
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


# --- blocking steps (the backend's pool) -------------------------------------------------------------

def wait_healthy(open_exec: Opener, check: TaskHealthcheck, workdir: str) -> str | None:
    """Runs the task's healthcheck until it passes (None) or fails `retries` times in a row after its start
    period (why, naming the task's fault). Root without capabilities, in the sandbox's first namespace:
    only the task's ENTRYPOINT runs there yet."""
    started = time.monotonic()
    failures, last = 0, ""
    while True:
        runner = open_exec(["sh", "-c", check.command], env={}, privileged=False, workdir=workdir)
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


def run_plain(open_exec: Opener, command: list[str]) -> bytes:
    """A short exec as root in the first PID namespace (privileged: signals reach any process there)."""
    runner = open_exec(command, env={})
    try:
        output = runner.read(time.monotonic() + 60)
        return bytes(output.stdout)
    finally:
        runner.close()


def agent_tails(open_exec: Opener, limit: int) -> tuple[str, str]:
    """The harness's stdout and stderr tails (the agent's own files: only logs are read from there)."""
    found = []
    for name in ("stdout", "stderr"):
        path = f"{task_sandbox.AGENT_LOGS}/{name}"
        script = f'[ -f {path} ] && [ ! -L {path} ] && wc -c <{path} && tail -c {limit} {path}'
        data = run_plain(open_exec, ["sh", "-c", script])
        size_line, _, chunk = data.partition(b"\n")
        tail = Tail(limit)
        size = int(size_line) if size_line.strip().isdigit() else len(chunk)
        tail.total = max(0, size - len(chunk))
        tail.feed(chunk)
        found.append(tail.text())
    return found[0], found[1]


def verify(open_exec: Opener, task: TaskEnvironment, image: TaskImage, tests: bytes,
           own_network: bool = False) -> VerifierResult:
    """The verifier's exec and its reading. `own_network`: test.sh gets a network namespace of its own,
    loopback only (where the backend cannot take the sandbox's network away)."""
    started = time.monotonic()
    nonce = secrets.token_hex(16)
    # the runtime tree ships veri's own setpriv, mount, tar: then its bin/ runs the verifier's steps
    own_tools = bool(task.runtime_tree) and os.access(Path(task.runtime_tree or "") / "bin" / "setpriv", os.X_OK)
    setup_path = f"{RUNTIME_MOUNT}/bin:{verifier.SYSTEM_PATH}" if own_tools else verifier.SYSTEM_PATH
    env = {**verifier.tools_env(bool(task.tools_dir), bool(task.runtime_tree)), **task.verifier_env,
           "PATH": verifier.path_for_tests(image.path, task.env, task.verifier_env, bool(task.tools_dir))}
    command = verifier.command(nonce, image.workdir, task.verifier_timeout_s, task.verifier_user or image.user,
                               setup_path, own_network=own_network)
    runner = open_exec(command, env=env, stdin=tests)
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


# --- the result ------------------------------------------------------------------------------------

def launch_result(launch: RolloutLaunch, turn: AgentTurn, tails: tuple[str, str], verified: VerifierResult | None,
                  output_dir: Path, truncated: bool, started: float) -> LaunchResult:
    """The rollout's result: truncated past the agent's timeout (and still verified), failed when the sandbox
    could not start the agent, else the agent's exit status."""
    task = launch.task_env
    assert task is not None
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
