"""The engine thread: collects waiting requests and decodes them together in one `DecodeBatch`.

Requests are admitted between decode steps, whole (all rows of a request join the same step, so one
response is sampled from one policy version), in arrival order, while the batch has room
(`max_batch_rows`). A weight update stops admissions, lets the rows in flight finish, is applied with
no row in the batch, and bumps `policy_version`; then admissions resume. The asyncio side only ever
enqueues work and awaits futures, so the event loop (and `/health`) stays responsive while decoding.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field

import structlog
import torch
from transformers import PreTrainedModel

from veri.services.policy.hf.engine import DecodeBatch, Row
from veri.services.policy.hf.errors import EngineFailure
from veri.services.policy.hf.weights import WeightUpdate, apply_update

log = structlog.get_logger(__name__)


@dataclass(eq=False)
class _Job:
    rows: list[Row]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    remaining: int = 0
    policy_version: int = -1


@dataclass(eq=False)
class _UpdateJob:
    update: WeightUpdate
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future


@dataclass
class BatcherStats:
    """Counters since the server started (`GET /stats`)."""

    requests: int = 0
    rows: int = 0
    prefills: int = 0
    decode_steps: int = 0
    decoded_rows: int = 0  # sum over decode steps of the rows in that step
    peak_batch_rows: int = 0
    peak_batch_requests: int = 0  # most distinct requests decoded in one step
    weight_updates: int = 0
    engine_failures: int = 0
    generation_s: float = 0.0  # wall time spent in prefill and decode forward passes


@dataclass(frozen=True)
class Generation:
    rows: list[Row]
    policy_version: int


@dataclass
class _Queues:
    waiting: deque[_Job] = field(default_factory=deque)
    updates: deque[_UpdateJob] = field(default_factory=deque)


class Batcher:
    def __init__(self, model: PreTrainedModel, *, max_batch_rows: int, threads: int) -> None:
        self._model = model
        self._threads = threads
        self._batch = DecodeBatch(model)
        self._max_batch_rows = max_batch_rows
        self._queues = _Queues()
        self._job_of: dict[Row, _Job] = {}
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="veri-policy-engine", daemon=True)
        self.policy_version = 0
        self.stats = BatcherStats()

    # --- asyncio side --------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout=30)

    async def generate(self, rows: list[Row]) -> Generation:
        loop = asyncio.get_running_loop()
        job = _Job(rows=rows, loop=loop, future=loop.create_future(), remaining=len(rows))
        with self._cond:
            self._queues.waiting.append(job)
            self._cond.notify()
        return await job.future

    async def update_weights(self, update: WeightUpdate) -> int:
        loop = asyncio.get_running_loop()
        job = _UpdateJob(update=update, loop=loop, future=loop.create_future())
        with self._cond:
            self._queues.updates.append(job)
            self._cond.notify()
        return await job.future

    def snapshot(self) -> dict:
        with self._cond:
            waiting, updates = len(self._queues.waiting), len(self._queues.updates)
        return {
            "policy_version": self.policy_version,
            "active_rows": len(self._batch),
            "waiting_requests": waiting,
            "pending_updates": updates,
            **asdict(self.stats),
        }

    # --- engine thread -------------------------------------------------------------------------
    def _run(self) -> None:
        torch.set_num_threads(self._threads)  # per-thread in some OpenMP builds: set it where the forwards run
        log.info("engine thread started", max_batch_rows=self._max_batch_rows, threads=self._threads)
        while True:
            with self._cond:
                while not (self._stopping or self._queues.waiting or self._queues.updates or len(self._batch)):
                    self._cond.wait()
                if self._stopping:
                    break
                update = self._queues.updates.popleft() if self._queues.updates and not len(self._batch) else None
                admitted = [] if update is not None or self._queues.updates else self._take_admissible()
            if update is not None:
                self._apply(update)
                continue
            try:
                if admitted:
                    self._admit(admitted)
                if len(self._batch):
                    self._step()
            except Exception as exc:  # noqa: BLE001 - a failed forward must not take the engine down
                self._fail_all(admitted, exc)
        self._shutdown()

    def _take_admissible(self) -> list[_Job]:
        taken: list[_Job] = []
        rows = len(self._batch)
        while self._queues.waiting:
            job = self._queues.waiting[0]
            if rows and rows + len(job.rows) > self._max_batch_rows:
                break
            taken.append(self._queues.waiting.popleft())
            rows += len(job.rows)
        return taken

    def _admit(self, jobs: list[_Job]) -> None:
        rows = []
        for job in jobs:
            job.policy_version = self.policy_version
            for row in job.rows:
                self._job_of[row] = job
            rows += job.rows
        self.stats.requests += len(jobs)
        self.stats.rows += len(rows)
        self.stats.prefills += 1
        started = time.perf_counter()
        finished = self._batch.admit(rows)
        self.stats.generation_s += time.perf_counter() - started
        self._finish(finished)

    def _step(self) -> None:
        rows = len(self._batch)
        requests = len({id(self._job_of[row]) for row in self._batch.rows})
        self.stats.decode_steps += 1
        self.stats.decoded_rows += rows
        self.stats.peak_batch_rows = max(self.stats.peak_batch_rows, rows)
        self.stats.peak_batch_requests = max(self.stats.peak_batch_requests, requests)
        started = time.perf_counter()
        finished = self._batch.step()
        self.stats.generation_s += time.perf_counter() - started
        self._finish(finished)

    def _finish(self, rows: list[Row]) -> None:
        for row in rows:
            job = self._job_of.pop(row)
            job.remaining -= 1
            if job.remaining == 0:
                _resolve(job.loop, job.future, Generation(rows=job.rows, policy_version=job.policy_version))

    def _apply(self, job: _UpdateJob) -> None:
        try:
            apply_update(self._model, job.update)
        except Exception as exc:  # copy_ failed part-way: nothing sane to serve, but keep answering
            log.exception("weight update failed", source=job.update.source)
            _fail(job.loop, job.future, EngineFailure(f"applying {job.update.source} failed: {exc}"))
            return
        # The trainer names the version (its step), so a resumed job's spans still carry step k = version k.
        self.policy_version = job.update.version if job.update.version is not None else self.policy_version + 1
        self.stats.weight_updates += 1
        log.info("weights updated", source=job.update.source, policy_version=self.policy_version)
        _resolve(job.loop, job.future, self.policy_version)

    def _fail_all(self, admitted: list[_Job], exc: Exception) -> None:
        log.exception("forward pass failed; failing the requests in the batch", rows=len(self._batch))
        self.stats.engine_failures += 1
        jobs = {id(job): job for job in admitted}
        for row in self._batch.clear():
            job = self._job_of[row]
            jobs[id(job)] = job
        for job in jobs.values():
            for row in job.rows:
                self._job_of.pop(row, None)
            _fail(job.loop, job.future, EngineFailure(f"generation failed: {type(exc).__name__}: {exc}"))

    def _shutdown(self) -> None:
        stopped = EngineFailure("the policy server is shutting down")
        jobs = {id(job): job for job in self._job_of.values()}
        for job in [*jobs.values(), *self._queues.waiting, *self._queues.updates]:
            _fail(job.loop, job.future, stopped)
        log.info("engine thread stopped")


def _resolve(loop: asyncio.AbstractEventLoop, future: asyncio.Future, value: object) -> None:
    def set_result() -> None:
        if not future.done():
            future.set_result(value)

    _call(loop, set_result)


def _fail(loop: asyncio.AbstractEventLoop, future: asyncio.Future, exc: Exception) -> None:
    def set_exception() -> None:
        if not future.done():
            future.set_exception(exc)

    _call(loop, set_exception)


def _call(loop: asyncio.AbstractEventLoop, fn) -> None:
    if not loop.is_closed():
        loop.call_soon_threadsafe(fn)
