"""Stopping `veri train`: Ctrl-C (SIGINT) and SIGTERM (`docker stop`, compose) stop it the same way, once.

The first stop signal raises KeyboardInterrupt in the main thread. While a step's rollouts run
(`run_until_stopped`) it cancels them instead: the cancellation runs every `finally` on the way out
(each sandbox of the group removed, each proxy session closed), then KeyboardInterrupt is raised.
Later signals only print a note: a second Ctrl-C, or compose's `docker stop` right after the terminal's
SIGINT, must not cut that clean-up short and leave sandboxes running to their timeout.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopState:
    """Which stop signal came first (None: none yet). One per process: `stop_state`."""

    def __init__(self) -> None:
        self.signal: int | None = None

    def first(self, signum: int) -> bool:
        """Note a stop signal; True for the first one (the one that stops), False for the ones after."""
        if self.signal is not None:
            print(f"veri train: {signal.Signals(signum).name} again - still stopping (removing sandboxes)",
                  file=sys.stderr, flush=True)
            return False
        self.signal = signum
        return True


stop_state = StopState()


def install_stop_handlers() -> None:
    """SIGINT and SIGTERM -> KeyboardInterrupt, once (main thread only)."""

    def on_stop(signum: int, frame: Any) -> None:
        if stop_state.first(signum):
            raise KeyboardInterrupt

    for signum in STOP_SIGNALS:
        signal.signal(signum, on_stop)


def run_until_stopped(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)`, where a stop signal cancels `main` (it cleans up on the way out) and then
    raises KeyboardInterrupt. Off the main thread (no signals there) it is plain `asyncio.run`."""
    if threading.current_thread() is not threading.main_thread():
        return asyncio.run(main)
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    stopped = False

    async def cancellable() -> T:
        nonlocal stopped
        loop, task = asyncio.get_running_loop(), asyncio.current_task()
        assert task is not None

        def stop(signum: int) -> None:
            nonlocal stopped
            if stop_state.first(signum):
                stopped = True
                task.cancel()

        for signum in STOP_SIGNALS:
            loop.add_signal_handler(signum, stop, signum)
        try:
            return await main
        finally:
            _restore(loop, previous)

    try:
        return asyncio.run(cancellable())
    except asyncio.CancelledError:
        if stopped:
            raise KeyboardInterrupt from None
        raise


def _restore(loop: asyncio.AbstractEventLoop, previous: dict[int, Any]) -> None:
    """The handlers from before; signals are held meanwhile (the loop resets them to the defaults first,
    and SIGTERM's default would kill the process mid clean-up)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        for signum, handler in previous.items():
            loop.remove_signal_handler(signum)
            signal.signal(signum, handler)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
