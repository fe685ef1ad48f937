"""A job's place on the GPUs: its plan (`plan_job`), the refusal of a job that does not say its backend
on a machine without a GPU (`unsaid_backend`), and the knobs the trainer's memory depends on
(`training_setup`), from the job file's schema (core/config.py) and the planner (planner.py)."""

from __future__ import annotations

from veri.core.config import JobConfig
from veri.core.grpo import PROMPT_TOKENS, TRL_BATCH_SIZE
from veri.core.placement import PolicyDevice
from veri.gpu.memory import TrainingSetup
from veri.gpu.planner import GpuInventory, GpuLayout, GpuVendor, LayoutError, model_facts, plan_layout, probe_gpus


def plan_job(config: JobConfig, gpus: GpuInventory | None = None) -> GpuLayout:
    """Where the trainer and the vLLM policy run (`backend: vllm`), planned for `gpus` (None: this
    machine, not probed with `device: cpu`); raises `LayoutError`. Plan once, before anything starts."""
    if gpus is None:
        gpus = GpuInventory(0, GpuVendor.NONE) if config.device == PolicyDevice.CPU else probe_gpus()
    if (unsaid := unsaid_backend(config, gpus)) is not None:
        raise unsaid
    return plan_layout(
        gpus,
        model_facts(config.model),
        tensor_parallel_size=config.vllm_tensor_parallel_size,
        data_parallel_size=config.vllm_data_parallel_size,
        gpu_memory_utilization=config.vllm_gpu_memory_utilization,
        weight_sync=config.weight_sync,
        device=config.device,
        sleep_mode=config.vllm_sleep_mode,
        training=training_setup(config),
    )


def unsaid_backend(config: JobConfig, gpus: GpuInventory) -> LayoutError | None:
    """A job that does not say `backend:` gets vllm, the GPU path. On a machine with no NVIDIA GPU that is
    refused, naming both choices, rather than guessed from the machine: the two backends train differently
    (hf: float32 on CPU), and a job file should mean the same job on every box. (An explicit `backend: vllm`
    there is a GPU job checked away from its box; `device: cpu` says vLLM's CPU build.)"""
    if "backend" in config.model_fields_set or config.device == PolicyDevice.CPU:
        return None
    if gpus.vendor == GpuVendor.NVIDIA and gpus.count > 0:
        return None
    return LayoutError(
        "`backend:` is not set, so the job takes the GPU path (vllm), and this machine has no NVIDIA GPU",
        "set `backend: hf` to train on this machine's CPU (as config/url_extract_cpu.yaml does), or"
        " `backend: vllm` for a GPU box (`veri validate --gpus N` plans it for one)",
        knob="backend",
    )


def training_setup(config: JobConfig) -> TrainingSetup:
    """The knobs the trainer's memory depends on, with TRL 1.16's defaults where the job sets none."""
    grpo = config.grpo
    batch = grpo.get("per_device_train_batch_size", TRL_BATCH_SIZE)
    init = grpo.get("model_init_kwargs")
    dtype = str(init.get("dtype") or init.get("torch_dtype") or "float32") if isinstance(init, dict) else "float32"
    weight_bytes = 4 if dtype.removeprefix("torch.") == "float32" else 2  # auto: the checkpoint's (half, mostly)
    sequence = config.max_response_length + PROMPT_TOKENS
    return TrainingSetup(
        batch_size=batch if isinstance(batch, int) and batch > 0 else TRL_BATCH_SIZE,
        sequence_length=min(sequence, config.max_model_len) if config.max_model_len else sequence,
        lora_rank=config.lora_rank,
        # transformers 5 renames it activation_checkpointing; TRL's GRPOConfig turns it on by default
        gradient_checkpointing=grpo.get("activation_checkpointing", grpo.get("gradient_checkpointing"))
        is not False,
        weight_bytes=weight_bytes,
        activation_bytes=4 if grpo.get("bf16") is False and not grpo.get("fp16") else 2,
        reference_model=config.kl_coef > 0 and config.lora_rank is None,
        max_model_len=config.max_model_len,
    )
