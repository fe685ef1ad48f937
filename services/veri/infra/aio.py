"""asyncio helpers every part that runs groups of tasks shares (the launcher's sandboxes, the trainer's
groups)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def gather_to_the_end(aws: list[Awaitable[T]]) -> list[T]:
    """`asyncio.gather`, but when cancelled it returns only once every child has finished its clean-up:
    gather itself gives up at the first child that ends cancelled, while the others still remove
    their sandboxes (and a second cancel, from asyncio.run's shutdown, would cut that short)."""
    children = [asyncio.ensure_future(aw) for aw in aws]
    try:
        return list(await asyncio.gather(*children))
    except asyncio.CancelledError:
        if children:
            await asyncio.wait(children)
        raise
