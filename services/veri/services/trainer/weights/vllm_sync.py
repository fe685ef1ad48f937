"""Weight sync into a vLLM policy: the seat TRL's server mode keeps for it, and the two ways to fill it.

TRL's loop (GRPOTrainer._generate_and_score_completions) calls `trainer.vllm_generation.sync_weights()`
at the start of each step's generation, when `global_step` changed since the last sync (so at step 0
too), and only then the rollout function. `AnnouncedSync` sits in that seat around either sync: once the
weights are in, it notes every server's process (`served.ServedWeights`: a server that restarts later is
caught) and announces version = global_step to the proxy, before any session opens. So every span of
step k is sampled by the weights of step k, and so is every span of an eval run after a step
(`periodic_eval.sync_now` syncs through the same seat).

    nccl        TRL's own `VLLMGeneration` (NCCL broadcast through vLLM's weight-transfer routes:
                trainer and policy on different GPUs); `TimedSync` only measures it.
    filesystem  `FilesystemSync` sits there instead: the weights (LoRA merged) go to
                <folder>/step-<k>/model.safetensors (written, then renamed), then every policy
                server loads them (`VllmAdmin.reload_weights`, veri's worker extension) and drops its
                prefix cache. Works on CPU, on one shared GPU, and wherever NCCL cannot go. A server
                that has not loaded them within `timeout_s` fails the step (`WeightSyncError`),
                naming the server, instead of hanging the job.
Either way the seconds each sync took go into the step's metrics (`weight_sync`).

Faults end the step, never hang it (docs/reliability.md, "Weight-sync faults"):
    bounded     every HTTP call (`vllm_admin.Bounds`); TRL's NCCL sync runs under a watchdog
                (`TimedSync`, `timeout_s`): NCCL's broadcast has no timeout of its own
    named       a timeout, a refused or cut-off connection, a malformed answer: `WeightSyncError`
                naming the server, what it did not do, and the fix
    every one   each server is loaded even when an earlier one failed, and each answer is checked;
                the error names every server that failed and every one that holds the step. One
                vLLM server with --data-parallel-size runs the reload on every engine (a replica
                that raises fails the call) but answers engine 0's results only (vLLM 0.31,
                `DPLBAsyncMPClient.call_utility_async`): the others' answers are not checked.
    restarted   a server that loaded nothing since it started (`VllmAdmin.loaded_weights` answers
                None) after this job loaded it: re-initialised, the step goes on (the load is the
                whole state dict); the job log says so. One holding a folder this job did not give
                it: another writer, the step fails.
    left held   a server a dead trainer left paused (`PausedSync`) is resumed at the job's start
                (`release_held`); one left asleep is woken by the first sync.

Sleep mode (`vllm_sleep_mode`, filesystem only: 1 GPU shared, or CPU): once a step's rollouts are in,
`FilesystemSync.sleep` puts every server to sleep (level 1), so the trainer's forward, backward and
optimizer step get the GPU memory; the next sync wakes the weights, loads the new ones into them, wakes
the KV cache and checks the server is awake before any rollout opens (the seconds: `policy_sleep`, and
inside `weight_sync`). A server left asleep by a crashed job is woken by the next job's first sync.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from veri.infra.http import HttpCallError
from veri.services.policy.vllm import WORKER_EXTENSION
from veri.services.policy.vllm.admin_client import VllmAdmin
from veri.services.policy.weight_files import drop_other_steps, write_step_weights
from veri.services.trainer.errors import WeightSyncError
from veri.services.trainer.weights.served import ServedWeights


class SyncSeat(Protocol):
    """What TRL's server-mode loop calls on `trainer.vllm_generation` when rollouts come from `rollout_func`."""

    def sync_weights(self) -> None: ...


class TrainerView(Protocol):
    """The two things a sync reads from the trainer it serves."""

    @property
    def model(self) -> Any: ...

    @property
    def state(self) -> Any: ...


class TimedSync:
    """TRL's own sync (nccl), measured and bounded: it runs on a watchdog thread, and one that has not
    returned within `timeout_s` fails the step (NCCL's broadcast waits forever for a peer that died;
    the stuck thread is a daemon, so the process still exits with the error). An exception from TRL's
    client (a refused or cut-off HTTP call, an NCCL error) becomes a `WeightSyncError` too."""

    def __init__(self, inner: SyncSeat, timing: Callable[[str, float], None], *, timeout_s: float = 600.0,
                 policy: str = "the vLLM policy server") -> None:
        self.inner = inner
        self.timing = timing
        self.timeout_s = timeout_s
        self.policy = policy

    def sync_weights(self) -> None:
        started = time.monotonic()
        outcome: list[BaseException | None] = []

        def run() -> None:
            try:
                self.inner.sync_weights()
                outcome.append(None)
            except BaseException as error:  # noqa: BLE001 - carried to the caller's thread
                outcome.append(error)

        worker = threading.Thread(target=run, name="veri-nccl-sync", daemon=True)
        worker.start()
        worker.join(self.timeout_s)
        if worker.is_alive():
            raise WeightSyncError(
                f"the NCCL weight sync into {self.policy} did not finish within {self.timeout_s:g} s (a policy"
                " server that died or restarted leaves the broadcast waiting): its log (`make logs`) says why;"
                " restart the stack (`make down && make up`) and resume the job (RESUME=1)")
        error = outcome[0] if outcome else None
        if isinstance(error, WeightSyncError):
            raise error
        if isinstance(error, Exception):
            raise WeightSyncError(
                f"the NCCL weight sync into {self.policy} failed ({type(error).__name__}: {str(error)[:300]}): a"
                " policy server that restarted mid-job has left TRL's NCCL group; restart the stack"
                " (`make down && make up`) and resume the job (RESUME=1)") from error
        if error is not None:
            raise error  # KeyboardInterrupt and the like, as they came
        self.timing("weight_sync", time.monotonic() - started)


def release_held(servers: list[VllmAdmin], report: Callable[[str], None]) -> None:
    """At the job's start: a server a dead trainer left paused (killed between `PausedSync`'s pause and
    resume) holds every request; resume it. A server that does not answer fails the job by name."""
    for server in servers:
        try:
            if server.is_paused():
                server.resume()
                report(f"the vLLM policy server at {server.base_url} was paused (a trainer died mid-update):"
                       " resumed it")
        except HttpCallError as error:
            raise WeightSyncError(
                f"the vLLM policy server at {server.base_url} did not say whether it is paused ({error.outcome}:"
                f" {error.detail[:300]}): is it up with VLLM_SERVER_DEV_MODE=1? its log (`make logs`) says why"
            ) from error


class AnnouncedSync:
    """The seat TRL calls, around either sync: the weights move (`inner`), every server's process is noted
    as holding them (`served`), and version = global_step is announced to the proxy: spans opened from
    now on carry it."""

    def __init__(self, inner: SyncSeat, trainer: TrainerView, announce: Callable[[int], Any],
                 served: ServedWeights) -> None:
        self.inner = inner
        self.trainer = trainer
        self.announce = announce
        self.served = served

    def sync_weights(self) -> None:
        self.inner.sync_weights()
        self.served.noted()
        self.announce(self.trainer.state.global_step)


class PausedSync:
    """max_staleness >= 1: rollouts run while the weights move. Every server holds its requests in flight
    (`VllmAdmin.pause`), the inner sync (an `AnnouncedSync`) loads the weights and announces version =
    global_step to the proxy, and the servers go on: no request fails, and a span that straddles the
    update carries both versions (the proxy reads the announcement before and after each call)."""

    def __init__(self, inner: SyncSeat, servers: list[VllmAdmin], trainer: TrainerView,
                 timing: Callable[[str, float], None]) -> None:
        self.inner = inner
        self.servers = servers
        self.trainer = trainer
        self.timing = timing

    def sync_weights(self) -> None:
        step = self.trainer.state.global_step
        started = time.monotonic()
        paused: list[VllmAdmin] = []
        try:
            for server in self.servers:
                server.pause()
                paused.append(server)
            self.timing("policy_pause", time.monotonic() - started)
            self.inner.sync_weights()
        except HttpCallError as error:
            raise WeightSyncError(f"a vLLM policy server did not pause for step {step}'s weights ({error.outcome}:"
                                  f" {error.detail[:300]}); its log (`make logs`) says why") from error
        finally:
            for server in paused:  # even when the update failed: no request stays held
                server.resume()


def empty_trainer_cache() -> None:
    """`torch.cuda.empty_cache()` where there is a GPU (the CPU twin has no cache to give back)."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


SLEEP_FREED = "policy/sleep_freed_gib"  # GPU memory the policy's sleep gave back (1 GPU shared)


def gpu_free_gib() -> float | None:
    """Free memory on the trainer's GPU, every process's use counted (so vLLM's too, on the one GPU they
    share), in GiB; None without CUDA (the CPU twin: nothing to measure)."""
    import torch

    if not torch.cuda.is_available():
        return None
    free, _total = torch.cuda.mem_get_info()
    return free / 2**30


class FilesystemSync:
    def __init__(
        self,
        trainer: TrainerView,
        servers: list[VllmAdmin],
        folder: Path,
        *,
        report: Callable[[str], None],
        timing: Callable[[str, float], None],
        sleep_mode: bool = False,
        free_cache: Callable[[], None] | None = None,
        figure: Callable[[str, float], None] | None = None,
        free_memory: Callable[[], float | None] = gpu_free_gib,
    ) -> None:
        self.trainer = trainer
        self.servers = servers
        self.folder = folder
        self.report = report  # one line to the job log
        self.timing = timing  # (name, seconds) into the step's metrics
        self.sleep_mode = sleep_mode
        self.free_cache = free_cache or empty_trainer_cache
        self.figure = figure or (lambda name, value: None)  # (name, value) into the step's metrics line
        self.free_memory = free_memory
        self.paused = False  # set when a `PausedSync` runs this one: requests are held, not drained
        self.given: dict[VllmAdmin, str] = {}  # server -> the folder this job last had it load

    def sync_weights(self) -> None:
        step = self.trainer.state.global_step
        started = time.monotonic()
        path = write_step_weights(self.folder, step, self.trainer.model)
        if self.sleep_mode:
            # The trainer's step is over: hand PyTorch's cached blocks back before vLLM takes its memory
            # again (TRL's colocate path does the same), or the KV cache may not fit when it wakes.
            self.free_cache()
        failed: list[WeightSyncError] = []
        for server in self.servers:  # every one, even after a failure: the error says which hold the step
            try:
                self._check_loaded(server, step)
                if self.sleep_mode:
                    self._call(server, step, "wake its weights", partial(server.wake_up, "weights"))
                # sleep mode: the KV cache wakes after the load, so the loading never holds both
                self._load(server, path, step, before_reset=partial(self._wake_fully, server, step)
                           if self.sleep_mode else None)
                self.given[server] = str(path)
            except WeightSyncError as error:
                self.given.pop(server, None)
                failed.append(error)
        if failed:
            loaded = [server.base_url for server in self.servers if self.given.get(server) == str(path)]
            held = f"; {', '.join(loaded)} loaded them" if loaded else ""
            raise WeightSyncError(f"{len(failed)} of {len(self.servers)} vLLM policy server(s) did not take step"
                                  f" {step}'s weights{held}: " + " | ".join(str(error) for error in failed))
        drop_other_steps(self.folder, path)  # every server has the new weights in memory
        seconds = time.monotonic() - started
        self.timing("weight_sync", seconds)
        self.report(f"step {step}: weights loaded by {len(self.servers)} policy server(s) in {seconds:.2f} s"
                    f" ({path})")

    def sleep(self, step: int) -> None:
        """Every server to sleep until the next sync (its rollouts are all in: nothing is waiting on it)."""
        if not self.sleep_mode:
            return
        started, free_before = time.monotonic(), self.free_memory()
        for server in self.servers:
            self._call(server, step, "go to sleep", partial(server.sleep, level=1))
        self.timing("policy_sleep", time.monotonic() - started)
        free_after = self.free_memory()
        if free_before is not None and free_after is not None:  # what the trainer's step gets back
            self.figure(SLEEP_FREED, free_after - free_before)

    def wake(self) -> None:
        """The job ends: leave the servers serving (a stack kept up answers again)."""
        for server in self.servers if self.sleep_mode else []:
            server.wake_up()

    def _wake_fully(self, server: VllmAdmin, step: int) -> None:
        self._call(server, step, "wake its KV cache", partial(server.wake_up, "kv_cache"))
        if self._call(server, step, "say whether it is awake", server.is_sleeping):
            raise WeightSyncError(f"the vLLM policy server at {server.base_url} still sleeps after waking its weights"
                                  f" and KV cache for step {step}: its log (`make logs`) says why")

    def _call(self, server: VllmAdmin, step: int, what: str, call: Callable[[], Any], fix: str | None = None) -> Any:
        try:
            return call()
        except HttpCallError as error:
            fix = fix or ("it runs with --enable-sleep-mode and VLLM_SERVER_DEV_MODE=1 when vllm_sleep_mode is set")
            raise WeightSyncError(
                f"the vLLM policy server at {server.base_url} did not {what} for step {step}"
                f" ({_why(error, server.bounds.control_s)}): {fix}; its log (`make logs`) says why"
            ) from error

    def _check_loaded(self, server: VllmAdmin, step: int) -> None:
        """A server this job loaded before must still hold what it loaded: one that restarted holds nothing
        (re-initialised by this load, and said), one holding another folder has another writer."""
        given = self.given.get(server)
        if given is None:
            return  # the job's first sync into it (or after a failed one): nothing to compare
        answers = self._call(server, step, "say which weights it holds", server.loaded_weights,
                             fix=f"run it with --worker-extension-cls {WORKER_EXTENSION} (an image built from"
                                 " this veri)")
        folders = {answer.get("folder") if isinstance(answer, dict) else None for answer in answers}
        if folders == {None}:
            self.report(f"step {step}: the vLLM policy server at {server.base_url} restarted since it loaded {given}"
                        f" (it serves the model folder's weights): loading step {step}'s weights into it; the"
                        " rollouts it served since its restart were sampled by the model folder's weights")
        elif folders != {given}:
            raise WeightSyncError(f"the vLLM policy server at {server.base_url} holds {sorted(map(str, folders))},"
                                  f" not {given} that this job loaded into it: something else loads its weights;"
                                  " give the job its own policy servers")

    def _load(self, server: VllmAdmin, path: Path, step: int, before_reset: Callable[[], None] | None = None) -> None:
        try:
            answers = server.reload_weights(path)
            if before_reset is not None:
                before_reset()
            # Paused (max_staleness >= 1): vLLM dropped its prefix cache at the pause, and the held requests
            # keep their blocks, which a reset would refuse.
            reset = server.reset_prefix_cache() if not self.paused else True
        except HttpCallError as error:
            raise WeightSyncError(
                f"the vLLM policy server at {server.base_url} did not load the weights of step {step}"
                f" ({_why(error, server.timeout_s)}); its log (`make logs`) says why, and the job resumes from its"
                " last checkpoint with RESUME=1"
            ) from error
        if not answers or any(not isinstance(answer, dict) or answer.get("folder") != str(path) for answer in answers):
            raise WeightSyncError(f"the vLLM policy server at {server.base_url} answered {answers!r} to loading"
                                  f" {path}: run it with --worker-extension-cls {WORKER_EXTENSION}")
        if not reset:
            raise WeightSyncError(f"the vLLM policy server at {server.base_url} kept its prefix cache after loading"
                                  f" step {step}'s weights (requests still running?): its log says why")



def _why(error: HttpCallError, timeout_s: float) -> str:
    """What went wrong with one call: a timeout, a server that died or restarted mid-call, or its answer."""
    if error.status is not None:
        fix = f"; {error.fix}" if error.fix != "see the service's log" else ""
        return f"{error.status}: {error.detail[:300]}{fix}"
    if "Timeout" in error.detail or "timed out" in error.detail:
        return f"no answer within {timeout_s:g} s: {error.detail[:200]}"
    return (f"no answer: {error.detail[:200]}; the server died, restarted or is down (`make up` starts it"
            " again)")
