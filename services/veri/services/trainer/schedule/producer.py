"""Asynchronous training's rollouts: groups admitted ahead of the trainer, taken as they finish, each
trained within `max_staleness` versions of the weights it was admitted under.

With `max_staleness` k >= 1 the trainer does not wait for a step's rollouts to start and end: a
`GroupProducer` runs groups on its own event loop (a thread), at most `max_parallel_groups` at once,
and hands each finished group over as soon as its N rollouts have ended.

    producer.allow(n, step)        groups 0 .. n-1 of the schedule may be started; a group admitted while
                                   the trainer is at step s is due at step s + k (its deadline)
    producer.take(count, ok, step) `count` finished groups for step `step`, in the order they finished,
                                   except that every group due by then is taken (waited for) and none is
                                   taken that would leave a later step more due groups than it can take;
                                   a finished group for which ok(group) fails comes back as dropped (each
                                   one allows one more group, so the step still gets `count`)
    producer.stop()                cancels what runs (the collector removes every sandbox and closes every
                                   session) and says what was left: groups running, groups finished untrained

The rule and its proof are in docs/async-training.md ("The bound, by construction"): the trainer
admits at most (k + 1) steps' worth of groups beyond what it consumed, and a step takes its due
groups first, so no group is trained more than k versions after the version it could first sample
under. A due group that runs longer than `hold_step_s` (a tool far past its timeout) stops holding the
step: it is taken or dropped, by its spans, when it ends.

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
    admitted_step: int = 0  # the trainer's step when it was admitted: it is due at admitted_step + max_staleness

    @property
    def oldest_version(self) -> int | None:
        """The policy version of its oldest span (None: no span, e.g. every rollout failed to start)."""
        versions = [span.policy_version for rollout in self.rollouts for span in rollout.record.spans]
        return min(versions) if versions else None


@dataclass
class Stopped:
    running: int  # groups cancelled while they ran (their sandboxes removed, nothing archived)
    untrained: int  # groups that had finished but no step had taken


@dataclass
class _Admitted:
    """A group admitted and not yet taken or dropped."""

    due: int | None  # the step that must take it (None: no bound, or a straggler released from it)
    started_at: float | None = None
    finished: FinishedGroup | None = None


# (group number, task index) -> the group's rollouts: the collector run for that group
RunGroup = Callable[[int, int], Awaitable[list[CollectedRollout]]]


@dataclass
class GroupProducer:
    run_group: RunGroup
    schedule: GroupSchedule
    max_parallel_groups: int
    first_group: int = 0  # a resumed job starts here
    max_staleness: int | None = None  # None: no deadlines, groups are taken purely in the order they finish
    groups_per_step: int = 1  # what a step takes: the places the deadlines are checked against
    hold_step_s: float | None = None  # a due group running longer than this no longer holds a step
    released: int = field(init=False, default=0)  # due groups that ran past hold_step_s (counted for the log)
    _allowed: int = field(init=False, default=0)
    _next: int = field(init=False, default=0)
    _step: int = field(init=False, default=0)  # the trainer's step (set by allow / take)
    _admitted: dict[int, _Admitted] = field(init=False, default_factory=dict)
    _order: list[int] = field(init=False, default_factory=list)  # finished, not yet taken: in the order they ended
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)
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

    def allow(self, groups: int, step: int | None = None) -> None:
        """Groups numbered below `first_group + groups` may be started; those admitted now, with the
        trainer at `step`, are due at step + max_staleness."""
        if step is not None:
            self._step = step
        self._call(self._allow, self.first_group + groups)

    def take(
        self, count: int, keep: Callable[[FinishedGroup], bool], step: int | None = None
    ) -> tuple[list[FinishedGroup], list[FinishedGroup]]:
        if step is not None:
            self._step = step
        kept: list[FinishedGroup] = []
        dropped: list[FinishedGroup] = []
        while len(kept) < count:
            self._collect_finished()
            self._release_stragglers()
            progressed = False
            for number in list(self._order):
                group = self._admitted[number].finished
                assert group is not None
                if not keep(group):
                    self._forget(number)
                    dropped.append(group)
                    self._call(self._allow, self._allowed + 1)  # a replacement, so the step still gets `count`
                    progressed = True
                elif self._may_take(number, count - len(kept)):
                    self._forget(number)
                    kept.append(group)
                    progressed = True
                    if len(kept) == count:
                        break
            if not progressed and len(kept) < count:
                self._wait_for_one()
        return kept, dropped

    def stop(self) -> Stopped:
        if self._thread is None:
            return Stopped(0, 0)
        running = self._call(self._cancel_all, timeout=None)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
        self._thread = None
        untrained = len(self._order)
        self._order.clear()
        while not self._finished.empty():
            untrained += isinstance(self._finished.get_nowait(), FinishedGroup)
        return Stopped(running, untrained)

    # -- the deadlines (on the trainer's thread) ---------------------------------------------------------

    def _may_take(self, number: int, places: int) -> bool:
        """Taking `number` now (with `places` left in this step) leaves every later step s + j no more
        groups due by then than it and the steps between can take: due_j - [it] <= places - 1 + j * G.
        With no deadlines, any finished group may be taken."""
        if self.max_staleness is None:
            return True
        with self._lock:
            dues = [entry.due for n, entry in self._admitted.items() if entry.due is not None]
            mine = self._admitted[number].due
        for j in range(self.max_staleness + 1):
            due_by = sum(due <= self._step + j for due in dues) - (mine is not None and mine <= self._step + j)
            if due_by > places - 1 + j * self.groups_per_step:
                return False
        return True

    def _release_stragglers(self) -> None:
        """A due group running past hold_step_s stops holding the step (it is taken or dropped when it ends)."""
        if self.hold_step_s is None:
            return
        now = time.monotonic()
        with self._lock:
            for entry in self._admitted.values():
                if (entry.due is not None and entry.due <= self._step and entry.finished is None
                        and entry.started_at is not None and now - entry.started_at > self.hold_step_s):
                    entry.due = None
                    self.released += 1

    def _collect_finished(self) -> None:
        while True:
            try:
                item = self._finished.get_nowait()
            except queue.Empty:
                return
            self._record(item)

    def _wait_for_one(self) -> None:
        try:
            item = self._finished.get(timeout=POLL_S)
        except queue.Empty:
            return
        self._record(item)

    def _record(self, item: FinishedGroup | BaseException) -> None:
        if isinstance(item, BaseException):
            raise item
        with self._lock:
            self._admitted[item.number].finished = item
        self._order.append(item.number)

    def _forget(self, number: int) -> None:
        with self._lock:
            del self._admitted[number]
        self._order.remove(number)

    # -- on the producer's loop --------------------------------------------------------------------------

    def _allow(self, bound: int) -> None:
        self._allowed = max(self._allowed, bound)
        if self._gate is None:
            self._gate = asyncio.Semaphore(self.max_parallel_groups)
        due = None if self.max_staleness is None else self._step + self.max_staleness
        while self._next < self._allowed:
            with self._lock:
                self._admitted[self._next] = _Admitted(due)
            task = self._loop.create_task(self._one(self._next, self._step))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            self._next += 1

    async def _one(self, number: int, admitted_step: int) -> None:
        assert self._gate is not None
        async with self._gate:
            started = time.monotonic()
            with self._lock:
                self._admitted[number].started_at = started
            task_index = self.schedule.task(number)
            try:
                rollouts = await self.run_group(number, task_index)
            except Exception as error:  # noqa: BLE001 - the trainer's `take` raises it: a broken collector stops the job
                self._finished.put(error)
                return
        self._finished.put(FinishedGroup(number, task_index, rollouts, started, time.monotonic(), admitted_step))

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
