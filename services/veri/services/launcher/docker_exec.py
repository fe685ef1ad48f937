"""A privileged `docker exec` with bytes on its stdin and its stdout/stderr read with a deadline
(blocking: the docker backend runs it in its pool). The Docker SDK's own stream reader waits without
a timeout; this one reads the multiplexed stream itself so an agent's turn can end at its deadline
while the exec goes on (the caller then kills it)."""

from __future__ import annotations

import re
import select
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Any

HEADER = struct.Struct(">BxxxL")  # docker's multiplexed stream: stream id (1 stdout, 2 stderr), length
MAX_BYTES = 64 << 20  # per stream: past it the rest is dropped (the verifier prints at most ~12 MB)


@dataclass
class ExecOutput:
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    ended: bool = False  # the exec closed its output (it exited)
    timed_out: bool = False  # the deadline passed first


class PrivilegedExec:
    """One exec as root with every capability (runsc gives a privileged exec the full set, even in a
    cap_drop=ALL, no-new-privileges container; privileged=False: the container's, none). Its stdin gets
    `stdin` and is then closed."""

    def __init__(self, client: Any, container_id: str, command: list[str], *, env: dict[str, str],
                 stdin: bytes = b"", privileged: bool = True, workdir: str | None = None) -> None:
        self.client = client
        created = client.api.exec_create(container_id, command, stdin=True, stdout=True, stderr=True,
                                         privileged=privileged, user="0", environment=env, workdir=workdir)
        self.exec_id = created["Id"]
        self._response = client.api.exec_start(self.exec_id, socket=True)
        self._socket: socket.socket = getattr(self._response, "_sock", self._response)
        self.output = ExecOutput()
        self._buffer = bytearray()
        try:
            if stdin:
                self._socket.sendall(stdin)
            self._socket.shutdown(socket.SHUT_WR)
        except OSError:  # it exited before reading all of it: its output says why
            pass

    def read(self, deadline: float, until: re.Pattern[bytes] | None = None) -> ExecOutput:
        """Reads until the exec ends, `until` matches its stdout, or time.monotonic() passes `deadline`."""
        while not self.output.ended:
            if until is not None and until.search(self.output.stdout):
                break
            left = deadline - time.monotonic()
            if left <= 0:
                self.output.timed_out = True
                break
            ready, _, _ = select.select([self._socket], [], [], min(left, 5.0))
            if not ready:
                continue
            try:
                chunk = self._socket.recv(1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                self.output.ended = True
            self._buffer += chunk
            self._frames()
        return self.output

    def exit_code(self, wait_s: float = 2.0) -> int | None:
        """The exit status (None while it runs: docker may take a moment after the stream closed)."""
        deadline = time.monotonic() + wait_s
        while True:
            answer = self.client.api.exec_inspect(self.exec_id)
            if not answer.get("Running") or time.monotonic() > deadline:
                return None if answer.get("Running") else answer.get("ExitCode")
            time.sleep(0.05)

    def close(self) -> None:
        try:
            self._socket.close()
            self._response.close()
        except OSError:
            pass

    def _frames(self) -> None:
        while len(self._buffer) >= HEADER.size:
            stream, length = HEADER.unpack_from(self._buffer)
            if len(self._buffer) < HEADER.size + length:
                return
            data = bytes(self._buffer[HEADER.size:HEADER.size + length])
            del self._buffer[:HEADER.size + length]
            target = self.output.stderr if stream == 2 else self.output.stdout
            if len(target) < MAX_BYTES:
                target += data[:MAX_BYTES - len(target)]
