"""Waiting on an event instead of sleeping and hoping: poll a condition until it holds, within a budget
sized for a loaded 2-core box (the wait ends with the event, so a quiet box never spends it)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def wait_for(condition: Callable[[], T], what: str, timeout_s: float = 60.0, every_s: float = 0.05) -> T:
    """`condition()`'s first truthy value; fails the test naming `what` when `timeout_s` passes first."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(every_s)


async def until(condition: Callable[[], T], what: str, timeout_s: float = 60.0, every_s: float = 0.05) -> T:
    """`wait_for` inside an event loop: the loop keeps running while it waits."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        await asyncio.sleep(every_s)


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent or init to reap it is dead)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status
