"""Asynchronous training's rollouts: groups dispatched ahead of the trainer, taken as they finish.

With `max_staleness` k >= 1 the trainer does not wait for a step's rollouts to start and end: a
`GroupProducer` runs groups on its own event loop (a thread), at most `max_parallel_groups` at once,
and hands each finished group over as soon as its N rollouts have ended; a straggler holds no step.

    producer.allow(n)         groups 0 .. n-1 of the schedule may be started (the trainer raises the
                              bound as it takes groups: groups for step s + k start while s trains)
    producer.take(count, ok)  the next `count` finished groups for which ok(group) holds, in the order
                              they finished; the others come back as dropped (each one allows one more
                              group, so the step still gets `count`)
    producer.stop()           cancels what runs (the collector removes every sandbox and closes every
                              session) and says what was left: groups running, groups finished untrained

Which task a group runs is the `GroupSchedule`'s: the dataset in a seeded permutation per epoch, so a
resumed job continues at the same place (group s * groups_per_step).
"""

from __future__ import annotations

import asyncio
import inspect
import queue
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from veri.loop.collect.collect import CollectedRollout

POLL_S = 0.25  # how often a waiting `take` looks up: Ctrl-C must reach the main thread promptly


@dataclass(frozen=True)
class GroupSchedule:
    """Group number -> task index: every task once per epoch, in a seeded permutation of the dataset."""

    n_tasks: int
    seed: int

    def task(self, group: int) -> int:
        epoch, position = divmod(group, self.n_tasks)
        order = torch.randperm(self.n_tasks, generator=torch.Generator().manual_seed(self.seed + epoch))
        return int(order[position])


@dataclass
class FinishedGroup:
    number: int  # its place in the schedule
    task_index: int
    rollouts: list[CollectedRollout]
    started_at: float  # time.monotonic() when its first rollout was started
    finished_at: float

    @property
    def oldest_version(self) -> int | None:
        """The policy version of its oldest span (None: no span, e.g. every rollout failed to start)."""
        versions = [span.policy_version for rollout in self.rollouts for span in rollout.record.spans]
        return min(versions) if versions else None


@dataclass
class Stopped:
    running: int  # groups cancelled while they ran (their sandboxes removed, nothing archived)
    untrained: int  # groups that had finished but no step had taken


# (group number, task index) -> the group's rollouts: the collector run for that group
RunGroup = Callable[[int, int], Awaitable[list[CollectedRollout]]]


@dataclass
class GroupProducer:
    run_group: RunGroup
    schedule: GroupSchedule
    max_parallel_groups: int
    first_group: int = 0  # a resumed job starts here
    _allowed: int = field(init=False, default=0)
    _next: int = field(init=False, default=0)
    _finished: queue.Queue[FinishedGroup | BaseException] = field(init=False, default_factory=queue.Queue)
    _loop: asyncio.AbstractEventLoop = field(init=False, default_factory=asyncio.new_event_loop)
    _tasks: set[asyncio.Task[Any]] = field(init=False, default_factory=set)
    _thread: threading.Thread | None = field(init=False, default=None)
    _gate: asyncio.Semaphore | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self._next = self._allowed = self.first_group

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop.run_forever, name="veri-rollouts", daemon=True)
        self._thread.start()

    def allow(self, groups: int) -> None:
        """Groups numbered below `first_group + groups` may be started."""
        self._call(self._allow, self.first_group + groups)

    def take(
        self, count: int, keep: Callable[[FinishedGroup], bool]
    ) -> tuple[list[FinishedGroup], list[FinishedGroup]]:
        kept: list[FinishedGroup] = []
        dropped: list[FinishedGroup] = []
        while len(kept) < count:
            try:
                item = self._finished.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if isinstance(item, BaseException):
                raise item
            if keep(item):
                kept.append(item)
            else:
                dropped.append(item)
                self._call(self._allow, self._allowed + 1)  # a replacement, so the step still gets `count`
        return kept, dropped

    def stop(self) -> Stopped:
        if self._thread is None:
            return Stopped(0, 0)
        running = self._call(self._cancel_all, timeout=None)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
        self._thread = None
        untrained = 0
        while not self._finished.empty():
            untrained += isinstance(self._finished.get_nowait(), FinishedGroup)
        return Stopped(running, untrained)

    # -- on the producer's loop --------------------------------------------------------------------------

    def _allow(self, bound: int) -> None:
        self._allowed = max(self._allowed, bound)
        if self._gate is None:
            self._gate = asyncio.Semaphore(self.max_parallel_groups)
        while self._next < self._allowed:
            task = self._loop.create_task(self._one(self._next))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            self._next += 1

    async def _one(self, number: int) -> None:
        assert self._gate is not None
        async with self._gate:
            started = time.monotonic()
            task_index = self.schedule.task(number)
            try:
                rollouts = await self.run_group(number, task_index)
            except Exception as error:  # noqa: BLE001 - the trainer's `take` raises it: a broken collector stops the job
                self._finished.put(error)
                return
        self._finished.put(FinishedGroup(number, task_index, rollouts, started, time.monotonic()))

    async def _cancel_all(self) -> int:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)  # every group's clean-up (sandboxes removed) runs to its end
        return len(tasks)

    def _call(self, function: Callable[..., Any], *args: Any, timeout: float | None = 60.0) -> Any:
        """Run `function(*args)` on the producer's loop (what it returns, awaited there if awaitable)."""

        async def run() -> Any:
            result = function(*args)
            return await result if inspect.isawaitable(result) else result

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=timeout)
