"""A token bucket for object creation: a group of 512 rollouts must not reach the apiserver as 1,500
requests at once (client-go's own default is 5 QPS with a burst of 10; a launcher gets its own knob)."""

from __future__ import annotations

import asyncio
import time


class CreationPacer:
    def __init__(self, per_second: float, burst: int) -> None:
        if per_second <= 0 or burst < 1:
            raise ValueError(f"creation rate must be > 0 with a burst >= 1 (got {per_second}/s, burst {burst})")
        self.per_second = per_second
        self.burst = burst
        self._tokens = float(burst)
        self._stamp = time.monotonic()
        self._lock = asyncio.Lock()

    async def wait(self) -> None:
        """Returns once this caller may create one rollout's objects."""
        async with self._lock:  # first come, first served
            while True:
                now = time.monotonic()
                self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.per_second)
                self._stamp = now
                if self._tokens >= 1:
                    self._tokens -= 1
                    return
                await asyncio.sleep((1 - self._tokens) / self.per_second)
