"""Weight sync into a vLLM policy: the seat TRL's server mode keeps for it, and the two ways to fill it.

TRL's loop (GRPOTrainer._generate_and_score_completions) calls `trainer.vllm_generation.sync_weights()`
at the start of each step's generation, when `global_step` changed since the last sync (so at step 0
too), and only then the rollout function, which announces version = global_step to the proxy before
any session opens. So every span of step k is sampled by the weights of step k.

    nccl        TRL's own `VLLMGeneration` (NCCL broadcast through vLLM's weight-transfer routes:
                trainer and policy on different GPUs); `TimedSync` only measures it.
    filesystem  `FilesystemSync` sits there instead: the weights (LoRA merged) go to
                <folder>/step-<k>/model.safetensors (written, then renamed), then every policy
                server loads them (`VllmAdmin.reload_weights`, veri's worker extension) and drops its
                prefix cache. Works on CPU, on one shared GPU, and wherever NCCL cannot go. A server
                that has not loaded them within `timeout_s` fails the step (`WeightSyncError`),
                naming the server, instead of hanging the job.
Either way the seconds each sync took go into the step's metrics (`weight_sync`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from veri.core.http import HttpCallError
from veri.policy.vllm import WORKER_EXTENSION
from veri.trainer.errors import WeightSyncError
from veri.trainer.weights.state import drop_other_steps, write_step_weights
from veri.trainer.weights.vllm_admin import VllmAdmin


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
    """TRL's own sync (nccl), measured."""

    def __init__(self, inner: SyncSeat, timing: Callable[[str, float], None]) -> None:
        self.inner = inner
        self.timing = timing

    def sync_weights(self) -> None:
        started = time.monotonic()
        self.inner.sync_weights()
        self.timing("weight_sync", time.monotonic() - started)


class FilesystemSync:
    def __init__(
        self,
        trainer: TrainerView,
        servers: list[VllmAdmin],
        folder: Path,
        *,
        report: Callable[[str], None],
        timing: Callable[[str, float], None],
    ) -> None:
        self.trainer = trainer
        self.servers = servers
        self.folder = folder
        self.report = report  # one line to the job log
        self.timing = timing  # (name, seconds) into the step's metrics

    def sync_weights(self) -> None:
        step = self.trainer.state.global_step
        started = time.monotonic()
        path = write_step_weights(self.folder, step, self.trainer.model)
        for server in self.servers:
            self._load(server, path, step)
        drop_other_steps(self.folder, path)  # every server has the new weights in memory
        seconds = time.monotonic() - started
        self.timing("weight_sync", seconds)
        self.report(f"step {step}: weights loaded by {len(self.servers)} policy server(s) in {seconds:.2f} s"
                    f" ({path})")

    def _load(self, server: VllmAdmin, path: Path, step: int) -> None:
        try:
            answers = server.reload_weights(path)
            reset = server.reset_prefix_cache()
        except HttpCallError as error:
            raise WeightSyncError(
                f"the vLLM policy server at {server.base_url} did not load the weights of step {step}"
                f" within {server.timeout_s:g} s ({error.outcome}: {error.detail[:300]}); its log (`make logs`)"
                " says why, and the job resumes from its last checkpoint with RESUME=1"
            ) from error
        if not answers or any(not isinstance(answer, dict) or answer.get("folder") != str(path) for answer in answers):
            raise WeightSyncError(f"the vLLM policy server at {server.base_url} answered {answers!r} to loading"
                                  f" {path}: run it with --worker-extension-cls {WORKER_EXTENSION}")
        if not reset:
            raise WeightSyncError(f"the vLLM policy server at {server.base_url} kept its prefix cache after loading"
                                  f" step {step}'s weights (requests still running?): its log says why")

