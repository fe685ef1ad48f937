"""A command in a task pod's container through the Kubernetes API's exec (pods/exec, a websocket): the
Kubernetes side of task_steps.Exec (docker's is docker_exec.PrivilegedExec). Blocking: the backend's pool.

Kubernetes' exec has no environment, working folder, privileged flag or stdin close (the v4 channel
protocol of 1.20 cannot half-close), so `exec_command` wraps the command in what gives them:
`env` (set and unset: never a credential, those stay in the container's env from the rollout's Secret),
`cd`, `setpriv` dropping every capability for an exec that must have none, and `head -c N` so the
command's stdin ends after the N bytes sent.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.stream import stream
from websocket import WebSocketException

from veri.services.launcher.docker_exec import MAX_BYTES, ExecOutput

READ_SLICE_S = 5.0


@dataclass(frozen=True)
class PodEnv:
    """What the container's environment holds beyond its image's (`container`), and what every exec should
    see of it (`base`, the task's [environment.env]); an exec's own variables go on top of `base`."""

    container: dict[str, str] = field(default_factory=dict)
    base: dict[str, str] = field(default_factory=dict)


def exec_command(command: list[str], *, env: dict[str, str], pod_env: PodEnv, stdin_bytes: int = 0,
                 privileged: bool = True, workdir: str | None = None) -> list[str]:
    """`command` wrapped so that it runs with `pod_env.base` + `env` (the container's other variables
    unset; only variables whose value differs from the container's are written out), from `workdir`,
    without any capability unless `privileged`, reading exactly `stdin_bytes` of stdin."""
    wanted = {**pod_env.base, **env}
    unset = sorted(name for name in pod_env.container if name not in wanted)
    changed = {name: value for name, value in wanted.items() if pod_env.container.get(name) != value}
    wrapped = list(command)
    if not privileged:  # root's capabilities come from the bounding set at execve: an empty one leaves none
        wrapped = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", *wrapped]
    if unset or changed:
        wrapped = ["env", *(f"--unset={name}" for name in unset),
                   *(f"{name}={value}" for name, value in sorted(changed.items())), *wrapped]
    if workdir:
        wrapped = ["sh", "-c", 'cd "$0" && exec "$@"', workdir, *wrapped]
    if stdin_bytes:
        wrapped = ["sh", "-c", 'head -c "$0" | "$@"', str(stdin_bytes), *wrapped]
    return wrapped


class PodExec:
    """One exec as root in the pod's container, with the container's capabilities (privileged) or none.
    Its stdin gets `stdin`; the command reads exactly that much."""

    def __init__(self, core: Any, namespace: str, pod: str, container: str, command: list[str], *,
                 env: dict[str, str], pod_env: PodEnv, stdin: bytes = b"", privileged: bool = True,
                 workdir: str | None = None) -> None:
        full = exec_command(command, env=env, pod_env=pod_env, stdin_bytes=len(stdin), privileged=privileged,
                            workdir=workdir)
        # stream() swaps the ApiClient's request function while it runs: on a client other threads share,
        # their calls would go out as websocket handshakes. Each exec gets a client of its own.
        api = client.ApiClient(core.api_client.configuration)
        try:
            self._ws = stream(client.CoreV1Api(api).connect_get_namespaced_pod_exec, pod, namespace,
                              container=container, command=full, stdin=bool(stdin), stdout=True, stderr=True,
                              tty=False, _preload_content=False, binary=True)
        finally:
            api.close()
        self.output = ExecOutput()
        if stdin:
            try:
                self._ws.write_stdin(stdin)
            except (WebSocketException, OSError):  # it ended before reading it all: its output says why
                pass

    def read(self, deadline: float, until: re.Pattern[bytes] | None = None) -> ExecOutput:
        """Reads until the exec ends, `until` matches its stdout, or time.monotonic() passes `deadline`."""
        while not self.output.ended:
            self._take()
            if until is not None and until.search(self.output.stdout):
                break
            left = deadline - time.monotonic()
            if left <= 0:
                self.output.timed_out = True
                break
            try:
                self._ws.update(timeout=min(left, READ_SLICE_S))
            except (WebSocketException, OSError):
                self._ws.close()
            if not self._ws.is_open():
                self._take()
                self.output.ended = True
        return self.output

    def exit_code(self, wait_s: float = 2.0) -> int | None:
        """The exit status from the exec's status channel (None while it runs or when it sent none)."""
        deadline = time.monotonic() + wait_s
        while self._ws.is_open() and time.monotonic() < deadline:
            self.read(deadline)
        try:
            code = self._ws.returncode
        except (KeyError, IndexError, TypeError, ValueError):
            return None
        return None if code is None else int(code)

    def close(self) -> None:
        try:
            self._ws.close()
        except (WebSocketException, OSError):
            pass

    def _take(self) -> None:
        for read, target in ((self._ws.read_stdout, self.output.stdout), (self._ws.read_stderr, self.output.stderr)):
            data = read(timeout=0)
            if data and len(target) < MAX_BYTES:
                target += data[:MAX_BYTES - len(target)]
