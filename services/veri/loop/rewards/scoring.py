"""Calling the reward functions for scored rollouts, each call under the job's timeout (see `functions`)."""

from __future__ import annotations

import asyncio
import math
import numbers
import threading
import time
import traceback
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from veri.core.rollout_record import RewardOutcome
from veri.core.rules import Rule, Verdict
from veri.loop.rewards.functions import RewardFunction, RewardInputs, one_line


class RewardScorer:
    """Calls the reward functions with a per-call timeout. Use as a context manager (or `close()`)."""

    def __init__(self, functions: list[RewardFunction], timeout_s: float):
        self.functions = functions
        self.timeout_s = timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        if any(function.is_async for function in functions):
            self._loop = asyncio.new_event_loop()
            self._loop_thread = threading.Thread(target=self._loop.run_forever, name="veri-rewards-async", daemon=True)
            self._loop_thread.start()

    def score(self, inputs: RewardInputs) -> RewardOutcome:
        return self.score_many([inputs])[0]

    def score_many(self, batch: list[RewardInputs]) -> list[RewardOutcome]:
        """Every (rollout, function) call starts at once; each is waited for until the shared deadline."""
        started = [[self._start(function, inputs) for function in self.functions] for inputs in batch]
        deadline = time.monotonic() + self.timeout_s
        return [self._outcome(futures, deadline) for futures in started]

    def close(self) -> None:
        if self._loop is not None and self._loop_thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop_thread.join(timeout=5)

    def __enter__(self) -> RewardScorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self, function: RewardFunction, inputs: RewardInputs) -> Future:
        kwargs = function.kwargs_for(inputs.available())
        if function.is_async:
            assert self._loop is not None
            try:
                coroutine = function.func(**kwargs)
            except Exception as error:  # noqa: BLE001 - e.g. a signature mismatch, before the coroutine exists
                return _failed(error)
            return asyncio.run_coroutine_threadsafe(_contained(coroutine), self._loop)
        future: Future = Future()

        def run() -> None:
            # A running future cannot be cancelled, so a call that outlives its timeout still completes it
            # (its result is ignored) instead of raising InvalidStateError in this thread.
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(function.func(**kwargs))
            except BaseException as error:  # noqa: BLE001 - user code; reported, never raised into the job
                future.set_exception(error)

        try:
            threading.Thread(target=run, name=f"veri-reward-{function.name}", daemon=True).start()
        except RuntimeError as error:  # no thread left (hung calls of earlier steps hold theirs): this call fails
            return _failed(error)
        return future

    def _outcome(self, futures: list[Future], deadline: float) -> RewardOutcome:
        per_function: dict[str, float | None] = {}
        verdicts: list[Verdict] = []
        for function, future in zip(self.functions, futures, strict=True):
            value, verdict = self._collect(function, future, deadline)
            per_function[function.name] = value
            if verdict:
                verdicts.append(verdict)
        if not verdicts and all(value is None for value in per_function.values()):
            verdicts.append(Verdict.of(Rule.REWARD_ERROR, "no reward function returned a value for this rollout"))
        if verdicts:
            return RewardOutcome(reward=None, per_function=per_function, verdicts=verdicts)
        total = sum(f.weight * v for f in self.functions if (v := per_function[f.name]) is not None)
        return RewardOutcome(reward=total, per_function=per_function)

    def _collect(
        self, function: RewardFunction, future: Future, deadline: float
    ) -> tuple[float | None, Verdict | None]:
        name = function.name
        try:
            result = future.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            future.cancel()  # cancels an async call; a sync thread is abandoned (see the module docstring)
            hint = " (an async function that blocks its event loop also times out: make it a plain def)"
            message = f"reward function {name!r} did not return within reward_timeout_s={self.timeout_s:g}s"
            return None, Verdict.of(Rule.REWARD_ERROR, message + (hint if function.is_async else ""),
                                    function=name, kind="timeout")
        except BaseException as error:  # noqa: BLE001 - whatever the user's function raised is its verdict
            error = error.escaped if isinstance(error, _Escaped) else error
            return None, Verdict.of(Rule.REWARD_ERROR, f"reward function {name!r} raised {one_line(error)}",
                                    function=name, kind="exception", traceback=_user_traceback(error))
        try:
            return _as_number(result), None
        except ValueError as error:
            return None, Verdict.of(Rule.REWARD_ERROR, f"reward function {name!r} {error}", function=name,
                                    kind="bad_value")


def _as_number(result: Any) -> float | None:
    """One function's value: None (or NaN, as TRL reads it) is no value; anything else must be one finite
    real number (numpy scalars included), alone or in a one-element list."""
    value = result
    if isinstance(result, (list, tuple)):
        if len(result) != 1:
            raise ValueError(f"returned {len(result)} values for 1 completion: return a list with one number")
        value = result[0]
    if value is None:
        return None
    if isinstance(value, numbers.Real):
        number = float(value)
        if math.isinf(number):  # one inf turns the group's mean and std, so every advantage, into NaN
            raise ValueError(f"returned {number}: return a finite number (or None for no value)")
        return None if math.isnan(number) else number
    raise ValueError(f"returned {_short_repr(value)}: return a list with one number (or None) per completion")


def _short_repr(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({type(value).__name__}, {len(text)} characters)"


class _Escaped(Exception):  # carries a SystemExit / KeyboardInterrupt out of the event loop
    def __init__(self, escaped: BaseException) -> None:
        super().__init__(str(escaped))
        self.escaped = escaped


async def _contained(coroutine: Any) -> Any:
    """An async function's SystemExit or KeyboardInterrupt would stop the shared event loop (asyncio
    re-raises them out of `run_forever`), and every later async call would then time out: keep it a
    reward_error of this call."""
    try:
        return await coroutine
    except (SystemExit, KeyboardInterrupt) as error:
        raise _Escaped(error) from error


def _failed(error: BaseException) -> Future:
    future: Future = Future()
    future.set_exception(error)
    return future


def _user_traceback(error: BaseException) -> str:
    return "".join(traceback.format_exception(error)[-6:])
