"""What a job config means to TRL and peft: `GRPOConfig` and `LoraConfig` kwargs from the job alone.

    job_grpo_kwargs     veri's knobs (core.grpo's knob table: the job's name wins), the backend's
                        defaults, then the `grpo:` pass-through coerced to GRPOConfig's field types
                        (but mask_truncated_completions, which veri applies per rollout: `masks_truncated`)
    lora_config_kwargs  `LoraConfig` kwargs, or None for a full fine-tune

veri.services.trainer.grpo.setup adds what only a running job knows (the checkpoint folder, the reward weights,
the plan's weight sync); veri.services.trainer.grpo.trl_checks checks the same kwargs against the installed TRL.
Core holds the schema and the tables (which GRPOConfig fields a knob sets or veri refuses) and imports
neither TRL nor peft.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Any

from pydantic import TypeAdapter

from veri.core.config import Backend, JobConfig
from veri.core.grpo import VERI_KNOBS

# GRPOConfig fields each backend sets: vllm: TRL's server mode against veri's policy server; hf: CPU, float32.
BACKEND_DEFAULTS: dict[Backend, dict[str, Any]] = {
    Backend.VLLM: {"use_vllm": True, "vllm_mode": "server"},
    Backend.HF: {"use_vllm": False, "use_cpu": True, "bf16": False},
}


@functools.cache
def grpo_field_types() -> dict[str, Any]:
    """Every field of the installed TRL's GRPOConfig -> its type (imports TRL: slow, cached)."""
    from trl import GRPOConfig

    hints = typing.get_type_hints(GRPOConfig)
    return {field.name: hints[field.name] for field in dataclasses.fields(GRPOConfig) if field.init}


# Both backends: TRL's per-token importance ratio between the trainer's probability (the weights being
# trained) and the sampler's captured one, truncated at `importance_sampling_cap` (TRL's clip_max). TRL
# runs it only with use_vllm, so the hf trainer gets an empty seat (`weights.sync.PushedAfterEachStep`).
# The mode may be changed in `grpo:` (TRL's default is sequence_mask).
CORRECTION: dict[str, Any] = {
    "vllm_importance_sampling_correction": True, "vllm_importance_sampling_mode": "token_truncate",
}


def knob_kwargs(config: JobConfig) -> dict[str, Any]:
    """The GRPOConfig kwargs veri's own knobs and the backend produce (no `grpo:` section)."""
    knobs = {field_name: config.knob(knob) for field_name, knob in VERI_KNOBS.items()}
    return {**BACKEND_DEFAULTS[config.backend], **CORRECTION, **knobs}


# Applied per rollout by veri (`masks_truncated`, the rollout function's `completion_truncated` rule), so
# TRL's own per-row check stays off: it would mask only the row in its slot, by its last token (a reply the
# client's stop sequence ended looks truncated to it), and train the rollout's other rows.
MASK_TRUNCATED = "mask_truncated_completions"


def job_grpo_kwargs(config: JobConfig) -> dict[str, Any]:
    """kwargs for `trl.GRPOConfig` from the job (setup adds `output_dir`, the reward weights, the server)."""
    types = grpo_field_types()
    passed = {key: TypeAdapter(types[key]).validate_python(value) for key, value in config.grpo.items()}
    return {**knob_kwargs(config), **passed, MASK_TRUNCATED: False}


def masks_truncated(config: JobConfig) -> bool:
    """The job's `grpo.mask_truncated_completions`: leave a rollout with an unfinished row out of the loss."""
    return bool(TypeAdapter(bool).validate_python(config.grpo.get(MASK_TRUNCATED, False)))


def lora_config_kwargs(config: JobConfig) -> dict[str, Any] | None:
    """kwargs for `peft.LoraConfig`, or None for a full fine-tune."""
    if config.lora_rank is None:
        return None
    return {
        "r": config.lora_rank,
        "lora_alpha": config.lora_alpha or 2 * config.lora_rank,
        "lora_dropout": config.lora_dropout or 0.0,
        "target_modules": "all-linear",
        "task_type": "CAUSAL_LM",
    }
