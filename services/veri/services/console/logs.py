"""train.log as server-sent events: the tail first, then each line as the trainer appends it (its JSON
lines shown as a person reads them: `readable`).

Each event carries the complete lines read since the last one (one `data:` field per line) and, as its
`id`, the byte offset after them, so a reconnecting EventSource (Last-Event-ID) resumes where it left
off. When the job is not running and nothing new has come, an `end` event closes the stream.
sse-starlette's EventSourceResponse (services/console/pages.py) encodes the events and pings an idle stream.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from sse_starlette import ServerSentEvent

TAIL_BYTES = 256_000  # a fresh page starts with at most this much of the log
PING_S = 15.0  # a comment line this often keeps proxies from closing an idle stream
SEP = "\n"  # the events' line ends: plain newlines, as the stream always had (the library's default is CRLF)


def start_offset(path: Path, last_event_id: str | None) -> int:
    """Where a stream starts: after the client's last event, else the tail's first whole line."""
    if last_event_id and last_event_id.isdigit():
        return int(last_event_id)
    size = path.stat().st_size if path.is_file() else 0
    if size <= TAIL_BYTES:
        return 0
    with path.open("rb") as handle:
        handle.seek(size - TAIL_BYTES)
        return size - TAIL_BYTES + len(handle.readline())


async def log_events(path: Path, running: Callable[[], bool], offset: int,
                     poll_s: float) -> AsyncIterator[ServerSentEvent]:
    while True:
        lines, offset = _read_lines(path, offset)
        if lines:
            yield _lines_event(lines, offset)
            continue
        if not running():
            lines, offset = _read_lines(path, offset)  # what came between the read and the check
            if lines:
                yield _lines_event(lines, offset)
            yield ServerSentEvent("the job is not running", event="end", sep=SEP)
            return
        await asyncio.sleep(poll_s)


def _lines_event(lines: list[str], offset: int) -> ServerSentEvent:
    # One `data:` field per line (the library splits on newlines, a stray CR included); the id is the
    # byte offset a reconnecting EventSource sends back as Last-Event-ID.
    return ServerSentEvent("\n".join(lines), id=str(offset), sep=SEP)


def _read_lines(path: Path, offset: int) -> tuple[list[str], int]:
    """The complete lines after `offset` (a line still being written waits for its newline)."""
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            data = handle.read(TAIL_BYTES)
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1
    if end == 0:
        return [], offset
    text = data[:end].decode("utf-8", errors="replace")
    lines = [shown for line in text.split("\n")[:-1] for shown in readable(line.rstrip("\r")).split("\n")]
    return lines, offset + end


def readable(line: str) -> str:
    """A JSON line of the trainer's log (infra/logging.py) as a person reads it: time, the level when it
    is not info, the event, its fields. Any other line (an older job's log) is shown as it is."""
    if not line.startswith("{"):
        return line
    try:
        event = json.loads(line)
    except ValueError:
        return line
    if not isinstance(event, dict) or "event" not in event:
        return line
    stamp, level, text = event.pop("timestamp", ""), event.pop("level", "info"), event.pop("event")
    for key in ("service", "pid", "logger"):
        event.pop(key, None)
    parts = [str(stamp), "" if level == "info" else str(level).upper(), str(text)]
    parts += [f"{key}={value}" for key, value in event.items()]
    return " ".join(part for part in parts if part).replace("\n", "\n    ")
