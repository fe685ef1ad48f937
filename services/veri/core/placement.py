"""The job's placement knobs, as the job file writes them: which device serves the policy, how weights
reach it, how many replicas. The GPU planner (gpu/planner.py) turns them into a plan."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

AUTO = "auto"  # vllm_data_parallel_size: auto
DataParallelSize = int | Literal["auto"] | None


class PolicyDevice(StrEnum):
    AUTO = "auto"  # a job knob only: NVIDIA GPUs, planned
    CUDA = "cuda"
    CPU = "cpu"  # vLLM's CPU build: no GPU plan


class WeightSync(StrEnum):
    AUTO = "auto"  # a job knob only: nccl with 2+ GPUs, filesystem otherwise
    NCCL = "nccl"  # TRL server mode: the trainer broadcasts to vLLM over NCCL
    FILESYSTEM = "filesystem"  # safetensors on the state volume, vLLM reloads them
