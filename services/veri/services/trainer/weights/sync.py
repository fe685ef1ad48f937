"""Weight sync and the policy-version invariant: the rollouts of step k are sampled by policy version k.

Step k is the k-th optimizer step (0-based; TRL's `global_step` is k while its rollouts are sampled),
version 0 is the model folder's weights, and every weight update makes the next version.

hf (CPU): `HfWeightSync`, a TrainerCallback.
  train begin   the server must serve the trainer's weights. A fresh server (version 0) on a fresh
                job already does; otherwise (a resumed job, a server that outlived an earlier job)
                the weights are pushed now, and since the hf server numbers versions by the updates
                it applied, spans then carry step + offset (`PolicyVersions`; the job log says so).
  step end      after every optimizer step: the weights (LoRA merged) go to <folder>/step-<k+1>/ as
                safetensors (written, then renamed), `POST /update_weights {"path"}`; the server applies
                it between decode steps and answers the new version, which must be the next one.
                Rollouts never run during a push (TRL's loop is sequential), so step k+1's spans all
                carry version k+1. The server reports versions itself: nothing is announced to the proxy.
vLLM (GPU): TRL pushes the weights over NCCL at the start of each step's generation (`_generate`:
  `sync_weights()` when global_step changed), and `vllm_sync.AnnouncedSync` announces version =
  global_step to the proxy (`announce_version`) before the rollout function opens any session.
Either backend: once a server holds the job's weights its process is noted (`served.ServedWeights`), so
a server that restarts afterwards is caught before its rollouts are scored.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from veri.services.policy.hf.admin_client import PolicyAdmin
from veri.services.policy.weight_files import drop_other_steps, write_step_weights
from veri.services.proxy.control_client import ControlClient
from veri.services.trainer.errors import WeightSyncError
from veri.services.trainer.weights.served import ServedWeights


@dataclass
class PolicyVersions:
    """The policy version the rollouts of a step must carry."""

    offset: int = 0  # server version - trainer step; 0 unless the server's count and the job's differ

    def expected(self, step: int) -> int:
        return step + self.offset


class PushedAfterEachStep:
    """hf: TRL's seat for a vLLM client, empty. The weights move in `HfWeightSync` after each optimizer
    step; seated (`grpo.setup.seat_weight_sync`) so that TRL's off-policy correction, which it gates on
    `use_vllm`, runs for the hf backend too."""

    def sync_weights(self) -> None:
        return None


def announce_version(control: ControlClient, step: int) -> int:
    """vLLM: the weights TRL just synced are version `step`; spans opened from now on carry it."""
    control.set_policy_version(step)
    return step


class HfWeightSync(TrainerCallback):
    def __init__(
        self,
        admin: PolicyAdmin,
        folder: Path,
        versions: PolicyVersions,
        served: ServedWeights,
        *,
        report: Callable[[str], None],
        timing: Callable[[str, float], None],
    ) -> None:
        self.admin = admin
        self.folder = folder
        self.versions = versions
        self.served = served
        self.report = report  # one line to the job log
        self.timing = timing  # (name, seconds) into the step's metrics

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, model: Any = None, **kw: Any
    ) -> None:
        step = state.global_step
        served = self.admin.policy_version()
        if served == step and step == 0:
            self.served.noted()
            self.report("policy server at version 0 (the model folder's weights): step k's rollouts carry version k")
            return
        version = self._push(model, step)  # e.g. a resumed job: the server gets the checkpoint's weights
        self.versions.offset = version - step
        self.report(f"policy server was at version {served}, the job at step {step}: pushed the trainer's"
                    f" weights as version {version}")

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, model: Any = None, **kw: Any
    ) -> None:
        started = time.monotonic()
        served, previous = self.admin.policy_version(), self.versions.expected(state.global_step - 1)
        if served == 0 != previous:  # a restarted server (the model folder's weights): the push puts ours back
            self.report(f"policy server at version 0 after step {state.global_step - 1}, expected {previous}:"
                        " it restarted; pushing the trainer's weights again")
        elif served != previous:
            raise WeightSyncError(
                f"the policy server is at version {served} after step {state.global_step - 1}, expected"
                f" {previous}: something else updates its weights; give the job its own policy server"
            )
        version = self._push(model, state.global_step)
        if version != self.versions.expected(state.global_step):
            raise WeightSyncError(f"the policy server took the weights of step {state.global_step} as version"
                                  f" {version}: it does not honour the version the trainer names")
        self.timing("weight_sync", time.monotonic() - started)

    def _push(self, model: Any, step: int) -> int:
        path = write_step_weights(self.folder, step, model)
        version = self.admin.update_weights(path, version=step)
        drop_other_steps(self.folder, path)  # the server has copied the weights in
        self.served.noted()
        return version
