"""GPU layout planner: which GPU trains and which serve the policy, decided before anything starts.

One node, 2–8 NVIDIA GPUs. GPU 0 trains (TRL's weight-sync communicator needs the trainer and the
policy server on different CUDA devices). The policy (vLLM) gets the rest: tensor parallel size TP =
the largest power of two that fits the remainder and divides the model's attention-head count (vLLM
requires the division), times `vllm_data_parallel_size` replicas. GPUs left over are reported idle.

`plan_layout` is pure (inventory + head count + knobs -> plan or `LayoutError`); `probe_gpus` is the
only part that looks at the machine, so the planner is tested without GPUs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from veri.core import envs

TRAINER_GPU = 0
MIN_GPUS = 2
MAX_GPUS = 8


class GpuVendor(StrEnum):
    NVIDIA = "nvidia"
    AMD = "amd"
    NONE = "none"  # no accelerator found


class LayoutError(ValueError):
    """The job cannot be laid out on these GPUs: what is wrong, and what to change."""

    def __init__(self, message: str, fix: str):
        self.message = message
        self.fix = fix
        super().__init__(f"{message}: {fix}")


@dataclass(frozen=True)
class GpuInventory:
    """What the machine has (or what the user says the target machine has: `veri validate --gpus N`)."""

    count: int
    vendor: GpuVendor = GpuVendor.NVIDIA
    nodes: int = 1
    names: tuple[str, ...] = ()

    @classmethod
    def nvidia(cls, count: int) -> GpuInventory:
        return cls(count=count, vendor=GpuVendor.NVIDIA if count else GpuVendor.NONE)


@dataclass(frozen=True)
class GpuLayout:
    total_gpus: int
    attention_heads: int
    tensor_parallel_size: int
    data_parallel_size: int
    trainer_gpu: int = TRAINER_GPU
    notes: tuple[str, ...] = ()

    @property
    def policy_gpus(self) -> tuple[int, ...]:
        first = self.trainer_gpu + 1
        return tuple(range(first, first + self.tensor_parallel_size * self.data_parallel_size))

    @property
    def idle_gpus(self) -> tuple[int, ...]:
        used = {self.trainer_gpu, *self.policy_gpus}
        return tuple(gpu for gpu in range(self.total_gpus) if gpu not in used)

    @property
    def replicas(self) -> list[tuple[int, ...]]:
        """The GPUs of each vLLM data-parallel replica (TP GPUs each)."""
        tp, gpus = self.tensor_parallel_size, self.policy_gpus
        return [gpus[i : i + tp] for i in range(0, len(gpus), tp)]

    def describe(self) -> str:
        lines = [
            f"{self.total_gpus} GPUs: trainer on GPU {self.trainer_gpu}; policy (vLLM) TP={self.tensor_parallel_size}"
            f" x DP={self.data_parallel_size} on GPUs {_gpu_list(self.policy_gpus)}"
            f" ({self.attention_heads} attention heads)",
            f"idle GPUs: {_gpu_list(self.idle_gpus) if self.idle_gpus else 'none'}",
        ]
        return "\n".join([*lines, *self.notes])


def plan_layout(
    gpus: GpuInventory,
    attention_heads: int,
    *,
    tensor_parallel_size: int | None = None,
    data_parallel_size: int | None = None,
) -> GpuLayout:
    """Plan the trainer/policy split, or raise `LayoutError` naming the fix.

    `tensor_parallel_size` / `data_parallel_size` are the job's explicit `vllm_*` knobs (None = auto:
    TP as large as fits, one replica).
    """
    _check_machine(gpus)
    free = gpus.count - 1
    dp = data_parallel_size or 1
    if dp > free:
        raise LayoutError(
            f"vllm_data_parallel_size={dp} needs at least {dp} GPUs for the policy, but only {free} are free"
            " after the trainer's GPU 0",
            f"lower vllm_data_parallel_size to {free} or less",
        )
    if tensor_parallel_size is None:
        tp = _auto_tensor_parallel(free // dp, attention_heads)
    else:
        tp = tensor_parallel_size
        error = parallel_size_problem(attention_heads, tp, dp, free=free)
        if error:
            raise error
    notes = _idle_notes(free, attention_heads, tp, dp, auto=tensor_parallel_size is None)
    return GpuLayout(gpus.count, attention_heads, tp, dp, notes=notes)


def parallel_size_problem(
    attention_heads: int, tp: int | None, dp: int | None, *, free: int = MAX_GPUS - 1
) -> LayoutError | None:
    """What is wrong with explicit TP/DP knobs (None if nothing). `free`: GPUs left after the trainer's."""
    if tp is not None and attention_heads % tp:
        fits = [t for t in _divisors(attention_heads) if t <= free]
        return LayoutError(
            f"vllm_tensor_parallel_size={tp} does not divide the model's {attention_heads} attention heads"
            " (vLLM requires it)",
            f"use one of {fits}, or leave it unset to pick the largest that fits",
        )
    used = (tp or 1) * (dp or 1)
    if used > free:
        return LayoutError(
            f"vllm_tensor_parallel_size x vllm_data_parallel_size = {tp or 1} x {dp or 1} = {used} GPUs, but only"
            f" {free} are free for the policy (GPU 0 trains; at most {MAX_GPUS} GPUs per node)",
            "lower one of them",
        )
    return None


def attention_heads(model_dir: Path) -> int:
    """The attention-head count from a transformers model folder's config.json (text config for VLMs)."""
    config_file = Path(model_dir) / "config.json"
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError) as error:
        fix = "point `model:` at a transformers model folder"
        raise LayoutError(f"cannot read {config_file} ({error})", fix) from error
    text_config = config.get("text_config") or config
    heads = text_config.get("num_attention_heads")
    if not isinstance(heads, int) or heads < 1:
        raise LayoutError(f"{config_file} has no num_attention_heads", "point `model:` at a causal-LM model folder")
    return heads


def probe_gpus() -> GpuInventory:
    """What this machine has: nvidia-smi first (honouring CUDA_VISIBLE_DEVICES), then ROCm, then torch."""
    nodes = int(os.environ.get(envs.SLURM_JOB_NUM_NODES) or 1)
    if shutil.which("nvidia-smi"):
        names = _nvidia_smi_names()
        visible = os.environ.get(envs.CUDA_VISIBLE_DEVICES)
        if visible is not None:
            wanted = [item.strip() for item in visible.split(",") if item.strip()]
            names = [names[int(i)] for i in wanted if i.isdigit() and int(i) < len(names)] or names[: len(wanted)]
        return GpuInventory(len(names), GpuVendor.NVIDIA if names else GpuVendor.NONE, nodes, tuple(names))
    if shutil.which("rocm-smi") or Path("/dev/kfd").exists():
        return GpuInventory(0, GpuVendor.AMD, nodes)
    return GpuInventory(0, GpuVendor.NONE, nodes)


def _nvidia_smi_names() -> list[str]:
    try:
        result = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return []  # the driver is not usable: same as no GPU (the error below says what is needed)
    return [line.strip() for line in result.stdout.splitlines() if line.strip()]


def _check_machine(gpus: GpuInventory) -> None:
    cpu_hint = "or use `backend: hf` to train on CPU"
    if gpus.vendor == GpuVendor.AMD:
        raise LayoutError(
            "AMD GPUs are not supported: the vLLM policy and TRL's NCCL weight sync need NVIDIA GPUs",
            f"run on a box with 2–8 NVIDIA GPUs, {cpu_hint}",
        )
    if gpus.nodes > 1:
        raise LayoutError(f"multi-node jobs are not supported ({gpus.nodes} nodes)", "run on one node with 2–8 GPUs")
    if gpus.count == 0:
        raise LayoutError(
            "no NVIDIA GPU found: backend vllm needs 2–8 NVIDIA GPUs on one node", f"run on a GPU box, {cpu_hint}"
        )
    if gpus.count < MIN_GPUS:
        raise LayoutError(
            "1 GPU is not enough: the trainer and the vLLM policy must sit on different CUDA devices"
            " (TRL's weight sync)",
            f"run on a box with 2–8 NVIDIA GPUs, {cpu_hint}",
        )
    if gpus.count > MAX_GPUS:
        raise LayoutError(
            f"{gpus.count} GPUs visible; veri uses 2–{MAX_GPUS} on one node",
            f"set {envs.CUDA_VISIBLE_DEVICES} to the GPUs this job may use",
        )


def _auto_tensor_parallel(budget: int, heads: int) -> int:
    tp = 1
    while tp * 2 <= budget and heads % (tp * 2) == 0:
        tp *= 2
    return tp


def _idle_notes(free: int, heads: int, tp: int, dp: int, *, auto: bool) -> tuple[str, ...]:
    idle = free - tp * dp
    if not idle:
        return ()
    if auto:
        why = f"TP={tp} is the largest power of two <= {free // dp} that divides {heads} heads"
    else:
        why = f"vllm_tensor_parallel_size={tp} x vllm_data_parallel_size={dp}"
    if free // tp > dp:
        hint = f"set vllm_data_parallel_size: {free // tp} to run {free // tp} replicas of TP={tp}"
    else:
        hint = f"set vllm_data_parallel_size: {free} to run {free} replicas of TP=1"
    return (f"{idle} GPU(s) idle ({why}); if the model fits on fewer GPUs, {hint}",)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _gpu_list(gpus: tuple[int, ...]) -> str:
    return ",".join(map(str, gpus))
