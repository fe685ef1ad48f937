"""TRL wiring: the GRPOConfig a job gets, and its GRPOTrainer (full fine-tune or PEFT LoRA).

The config is the job's (veri.services.trainer.grpo.config: veri's knobs, the backend's defaults, the `grpo:`
pass-through; the LoRA kwargs) plus what only a running job knows: the checkpoint folder, the reward
weights and, for vLLM, where and how the weights go (the plan's weight sync, `weights.vllm_sync`).
`TRAINER_DEFAULTS` apply where the job's `grpo:` section says nothing.

vLLM, either sync: TRL runs in server mode, so its vLLM-only steps run: the sync before each step's
rollouts and the importance-sampling correction (per token, truncated at `importance_sampling_cap`:
the served logprobs against the trainer's; its ratio lands in the step metrics under
train/sampling/importance_sampling_ratio/*, over every row: `grpo.ratio_metrics`). hf: the same
correction, through an empty seat (`weights.sync.PushedAfterEachStep`), since TRL gates it on
`use_vllm`. Generation never goes through TRL: the harnesses call the proxy. nccl: TRL's own client
syncs (it joins vLLM's NCCL group from this container's address). filesystem: TRL is built without
its client (which would open an NCCL group) and `seat_weight_sync` puts veri's sync in its place.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from veri.core.config import Backend, JobConfig
from veri.gpu.planner import GpuLayout, PolicyDevice, WeightSync
from veri.services.trainer.grpo import trl_internals
from veri.services.trainer.grpo.config import job_grpo_kwargs, lora_config_kwargs
from veri.services.trainer.grpo.trainer import veri_trainer_class
from veri.services.trainer.weights.vllm_sync import SyncSeat

TRAINER_DEFAULTS: dict[str, Any] = {
    "logging_steps": 1,  # one metrics line per step in the archive
    "report_to": "none",  # the archive sends metrics to TensorBoard / W&B itself
    "save_steps": 25,  # checkpoints to resume from (`veri train --resume`)
    "save_total_limit": 2,
}


def grpo_config_kwargs(
    config: JobConfig, *, output_dir: Path, reward_weights: list[float], plan: GpuLayout | None = None,
    policy_url: str | None = None,
) -> dict[str, Any]:
    """`plan` and `policy_url` (the first policy server): vLLM jobs only."""
    kwargs = {**TRAINER_DEFAULTS, **job_grpo_kwargs(config)}
    kwargs |= {"output_dir": str(output_dir), "reward_weights": reward_weights}
    if config.backend != Backend.VLLM:
        return kwargs
    assert plan is not None and policy_url is not None, "a vLLM job needs its plan and policy server"
    if plan.device == PolicyDevice.CPU:
        kwargs |= {"use_cpu": True, "bf16": False}  # float32, as the CPU twin serves it
    if plan.weight_sync == WeightSync.FILESYSTEM:
        kwargs["use_vllm"] = False  # no TRL client, no NCCL group: `seat_weight_sync` turns server mode on
    else:
        kwargs |= {"vllm_server_base_url": policy_url, "vllm_group_port": free_port()}
    return kwargs


def seat_weight_sync(trainer: Any, sync: SyncSeat) -> None:
    """Turn TRL's server-mode steps on for a trainer built without TRL's vLLM client, with `sync` as its
    client (`grpo.trl_internals.seat_weight_sync`)."""
    trl_internals.seat_weight_sync(trainer, sync)


def free_port() -> int:
    """A port for TRL's weight-sync group, free here: the trainer is the group's rank 0 and listens on it,
    so two jobs on one host never share one."""
    with socket.socket() as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])


def lora_config(config: JobConfig) -> Any:
    """A `peft.LoraConfig` when `lora_rank` is set, else None (full fine-tune)."""
    kwargs = lora_config_kwargs(config)
    if kwargs is None:
        return None
    from peft import LoraConfig

    return LoraConfig(**kwargs)


def build_trainer(
    config: JobConfig,
    *,
    args: dict[str, Any],
    tokenizer: Any,
    dataset: Any,
    rollout_func: Callable[[list[Any], Any], dict[str, list[Any]]],
    reward_funcs: list[Callable[..., Any]],
    callbacks: list[Any],
    model: Any = None,
) -> Any:
    """`model`: a model object already made (bench/device_check.py's random weights); None loads the job's folder."""
    from trl import GRPOConfig

    return veri_trainer_class()(
        model=str(config.model) if model is None else model,
        reward_funcs=reward_funcs,
        args=GRPOConfig(**args),
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=rollout_func,
        peft_config=lora_config(config),
        callbacks=callbacks,
    )
