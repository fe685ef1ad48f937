"""TRL wiring: the GRPOConfig a job gets, and its GRPOTrainer (full fine-tune or PEFT LoRA).

The config is the job's (`JobConfig.grpo_config_kwargs`: veri's knobs, the backend's defaults, the
`grpo:` pass-through) plus what only the trainer knows: the checkpoint folder, the reward weights
and, for vLLM, the policy server TRL syncs weights to. `TRAINER_DEFAULTS` apply where the job's
`grpo:` section says nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from veri.core.config import Backend, JobConfig

TRAINER_DEFAULTS: dict[str, Any] = {
    "logging_steps": 1,  # one metrics line per step in the archive
    "report_to": "none",  # the archive sends metrics to TensorBoard / W&B itself
    "save_steps": 25,  # checkpoints to resume from (`veri train --resume`)
    "save_total_limit": 2,
}


def grpo_config_kwargs(
    config: JobConfig, *, output_dir: Path, policy_url: str, reward_weights: list[float]
) -> dict[str, Any]:
    kwargs = {**TRAINER_DEFAULTS, **config.grpo_config_kwargs()}
    kwargs |= {"output_dir": str(output_dir), "reward_weights": reward_weights}
    if config.backend == Backend.VLLM:
        # TRL's server mode: it pushes weights over NCCL through vLLM's weight-transfer routes before each
        # step's rollouts. Generation itself never goes through TRL: the harnesses call the proxy.
        kwargs["vllm_server_base_url"] = policy_url
    return kwargs


def lora_config(config: JobConfig) -> Any:
    """A `peft.LoraConfig` when `lora_rank` is set, else None (full fine-tune)."""
    kwargs = config.lora_config_kwargs()
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
) -> Any:
    from trl import GRPOConfig, GRPOTrainer

    return GRPOTrainer(
        model=str(config.model),
        reward_funcs=reward_funcs,
        args=GRPOConfig(**args),
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=rollout_func,
        peft_config=lora_config(config),
        callbacks=callbacks,
    )
