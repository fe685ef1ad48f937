"""`GroupProducer` on its own: groups started only up to what the trainer allows and at most
`max_parallel_groups` at once, handed over in the order they finish, a dropped group replaced by the
next one, a collector's failure raised in the trainer's thread, and stop() cancelling what runs (each
group's clean-up run to its end) and counting what was left. `GroupSchedule`: a seeded permutation
per epoch, so a resumed job continues where it stopped."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from veri.services.trainer.schedule.producer import FinishedGroup, GroupProducer, GroupSchedule, Stopped

pytestmark = pytest.mark.timeout(60)  # a producer that never hands a group over leaves `take` waiting


@dataclass
class Groups:
    """A collector stand-in: group `number` runs until the test releases it (or is cancelled)."""

    started: list[int] = field(default_factory=list)
    cleaned_up: list[int] = field(default_factory=list)
    failing: set[int] = field(default_factory=set)
    running: int = 0
    most_at_once: int = 0
    _release: dict[int, threading.Event] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def release(self, *numbers: int) -> None:
        for number in numbers:
            self._gate(number).set()

    def _gate(self, number: int) -> threading.Event:
        with self._lock:
            return self._release.setdefault(number, threading.Event())

    async def __call__(self, number: int, task_index: int) -> list:
        self.started.append(number)
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            while not self._gate(number).is_set():
                await asyncio.sleep(0.005)
            if number in self.failing:
                raise RuntimeError(f"the collector failed on group {number}")
            return [f"rollout of group {number} (task {task_index})"]
        finally:  # the collector's clean-up (sandboxes removed), also when cancelled
            self.running -= 1
            self.cleaned_up.append(number)


@pytest.fixture
def groups() -> Groups:
    return Groups()


@pytest.fixture
def producer(groups: Groups) -> Iterator[GroupProducer]:
    made = GroupProducer(groups, GroupSchedule(n_tasks=4, seed=7), max_parallel_groups=2)
    made.start()
    yield made
    made.stop()


def wait_for(condition, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the producer did not get there"
        time.sleep(0.01)


def numbers(taken: list[FinishedGroup]) -> list[int]:
    return [group.number for group in taken]


def test_only_allowed_groups_start_and_at_most_max_parallel_at_once(groups: Groups, producer: GroupProducer):
    producer.allow(3)
    wait_for(lambda: groups.started == [0, 1])  # the third waits for a free place
    time.sleep(0.1)
    assert groups.started == [0, 1]
    groups.release(0)
    wait_for(lambda: groups.started == [0, 1, 2])
    groups.release(1, 2, 3)
    kept, dropped = producer.take(3, lambda group: True)
    assert numbers(kept)[0] == 0 and sorted(numbers(kept)) == [0, 1, 2]  # 1 and 2 finish in either order
    assert dropped == [] and groups.most_at_once == 2
    time.sleep(0.1)
    assert groups.started == [0, 1, 2]  # group 3 was never allowed
    producer.allow(2)  # a bound below what is allowed already changes nothing
    time.sleep(0.1)
    assert groups.started == [0, 1, 2]


def test_groups_are_handed_over_in_the_order_they_finish(groups: Groups, producer: GroupProducer):
    producer.allow(2)
    wait_for(lambda: groups.started == [0, 1])
    groups.release(1)  # the second finishes first: a straggler holds no step
    [first], _ = producer.take(1, lambda group: True)
    assert first.number == 1 and first.rollouts == [f"rollout of group 1 (task {first.task_index})"]
    assert first.task_index == GroupSchedule(4, seed=7).task(1) and first.started_at <= first.finished_at
    groups.release(0)
    [second], _ = producer.take(1, lambda group: True)
    assert second.number == 0


def test_a_dropped_group_is_replaced_so_the_step_still_gets_its_count(groups: Groups, producer: GroupProducer):
    producer.allow(2)
    groups.release(0, 1, 2)
    kept, dropped = producer.take(2, lambda group: group.number != 1)
    assert numbers(kept) == [0, 2] and numbers(dropped) == [1]
    assert groups.started == [0, 1, 2]  # group 2 started only because group 1 was dropped


def test_a_failing_collector_is_raised_where_the_trainer_takes(groups: Groups, producer: GroupProducer):
    groups.failing.add(0)
    producer.allow(1)
    groups.release(0)
    with pytest.raises(RuntimeError, match="the collector failed on group 0"):
        producer.take(1, lambda group: True)


def test_stop_cancels_what_runs_and_counts_what_was_left(groups: Groups):
    producer = GroupProducer(groups, GroupSchedule(n_tasks=4, seed=7), max_parallel_groups=2)
    producer.start()
    producer.allow(3)
    groups.release(0)
    wait_for(lambda: 0 in groups.cleaned_up and groups.started == [0, 1, 2])
    time.sleep(0.3)  # group 0's clean-up ran; let its task hand the group over and end
    left = producer.stop()
    assert (left.running, left.untrained) == (2, 1)  # groups 1 and 2 cancelled; group 0 finished, never taken
    assert sorted(groups.cleaned_up) == [0, 1, 2] and groups.running == 0  # every clean-up ran to its end
    assert producer.stop() == Stopped(0, 0)  # stopping again: nothing left


def test_a_resumed_producer_continues_the_schedule_where_the_job_stopped(groups: Groups):
    producer = GroupProducer(groups, GroupSchedule(n_tasks=4, seed=7), max_parallel_groups=2, first_group=6)
    producer.start()
    try:
        producer.allow(2)  # counted from first_group: groups 6 and 7
        groups.release(6, 7)
        kept, _ = producer.take(2, lambda group: True)
    finally:
        producer.stop()
    assert sorted(numbers(kept)) == [6, 7] and sorted(groups.started) == [6, 7]
    schedule = GroupSchedule(n_tasks=4, seed=7)
    assert {group.number: group.task_index for group in kept} == {6: schedule.task(6), 7: schedule.task(7)}


def test_the_schedule_runs_every_task_once_per_epoch_in_a_seeded_order():
    schedule = GroupSchedule(n_tasks=5, seed=3)
    epochs = [[schedule.task(group) for group in range(epoch * 5, epoch * 5 + 5)] for epoch in range(3)]
    assert all(sorted(order) == [0, 1, 2, 3, 4] for order in epochs)
    assert len({tuple(order) for order in epochs}) > 1  # a new permutation each epoch
    assert [GroupSchedule(5, seed=3).task(group) for group in range(15)] == sum(epochs, [])  # the same seed, order
    assert [GroupSchedule(5, seed=4).task(group) for group in range(15)] != sum(epochs, [])
