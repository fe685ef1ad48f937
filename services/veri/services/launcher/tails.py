"""Keep the last N bytes of a stream without holding the rest (a harness may print gigabytes)."""

from __future__ import annotations

import asyncio


class Tail:
    def __init__(self, limit: int):
        self.limit = limit
        self._buffer = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self._buffer += chunk
        if len(self._buffer) > 2 * self.limit:
            del self._buffer[: len(self._buffer) - self.limit]

    def text(self) -> str:
        kept = bytes(self._buffer[-self.limit :])
        prefix = f"[... {self.total - len(kept)} earlier bytes dropped ...]\n" if self.total > len(kept) else ""
        return prefix + kept.decode(errors="replace")


async def drain(stream: asyncio.StreamReader, tail: Tail) -> None:
    while chunk := await stream.read(65536):
        tail.feed(chunk)
