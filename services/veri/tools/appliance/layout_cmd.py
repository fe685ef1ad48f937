"""`veri layout`: print the GPU plan for a machine and a model (what goes where, and why).

    veri layout --gpus 4 --heads 32 --kv-heads 8 --params-b 4 --gpu-memory-gb 24 --dp auto
    veri layout --gpus 8 --model /models/Llama-70B --gpu-memory-gb 80 --json

With `--model` (its config.json) and the GPU memory known, the trainer's and the policy's memory are
estimated (veri.gpu.memory) from the trainer flags (`--lora-rank`, `--batch-size`, ...: the job's knobs)
and a plan that cannot fit is refused with the fix. Without `--gpus` it plans for this machine (nvidia-smi).
`--json` prints the plan as the containers get it (VERI_GPU_PLAN). A combination that cannot be planned
prints one line with the fix and exits 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from veri.gpu import memory, planner


def register(commands: argparse._SubParsersAction) -> None:
    command = commands.add_parser("layout", help="print the GPU plan: trainer and policy GPUs, TP, DP, and why")
    command.add_argument("--gpus", type=int, default=None,
                         help="plan for a box with N NVIDIA GPUs (default: this machine's)")
    model = command.add_mutually_exclusive_group(required=True)
    model.add_argument("--model", type=Path, help="model folder (config.json; safetensors headers for its size)")
    model.add_argument("--heads", type=int, help="the model's attention heads (instead of --model)")
    command.add_argument("--kv-heads", type=int, default=None, help="its KV heads (default: --heads)")
    command.add_argument("--tp", type=int, default=None, help="vllm_tensor_parallel_size (default: planned)")
    command.add_argument("--dp", type=_replicas, default=None,
                         help="vllm_data_parallel_size: a number or `auto` (default 1)")
    command.add_argument("--gpu-memory-gb", type=float, default=None,
                         help="memory per GPU in GiB (default: nvidia-smi's when planning for this machine)")
    command.add_argument("--params-b", type=float, default=None,
                         help="model size in billions of parameters (default: from --model)")
    command.add_argument("--gpu-memory-utilization", type=float, default=None, help="vllm_gpu_memory_utilization")
    command.add_argument("--weight-sync", choices=[item.value for item in planner.WeightSync], default="auto",
                         help="weight_sync: how the trainer's weights reach the policy (auto: planned)")
    command.add_argument("--device", choices=[item.value for item in planner.PolicyDevice], default="auto",
                         help="device: auto/cuda = NVIDIA GPUs, cpu = vLLM's CPU build")
    command.add_argument("--sleep-mode", action="store_true", help="vllm_sleep_mode (1 GPU, or --device cpu)")
    train = command.add_argument_group("the trainer's memory (estimated with --model; the job's knobs)")
    train.add_argument("--lora-rank", type=int, default=None, help="lora_rank (default: full fine-tune)")
    train.add_argument("--batch-size", type=int, default=memory.TRL_BATCH_SIZE,
                       help=f"grpo.per_device_train_batch_size (default TRL's {memory.TRL_BATCH_SIZE})")
    train.add_argument("--max-response-length", type=int, default=4096, help="max_response_length (default 4096)")
    train.add_argument("--max-model-len", type=int, default=None,
                       help="max_model_len (default: the model's positions)")
    train.add_argument("--no-gradient-checkpointing", action="store_true",
                       help="grpo.gradient_checkpointing: false (TRL's default is on)")
    train.add_argument("--train-dtype", choices=["float32", "bfloat16"], default="float32",
                       help="grpo.model_init_kwargs.dtype: the trainer's weights (TRL's default float32)")
    command.add_argument("--json", action="store_true", help="print the plan as JSON (what VERI_GPU_PLAN carries)")
    command.set_defaults(func=_print)


def plan_from_args(args: argparse.Namespace) -> planner.GpuLayout:
    """The plan the flags describe; raises `LayoutError`."""
    if args.kv_heads is not None and args.heads is None:
        raise planner.LayoutError("--kv-heads needs --heads", "give --heads H --kv-heads K, or --model DIR")
    if args.model is not None:
        facts = planner.model_facts(args.model)
    else:
        facts = planner.ModelFacts.from_heads(args.heads, args.kv_heads)
    if args.params_b is not None:
        facts = dataclasses.replace(facts, parameters=round(args.params_b * 1e9), source="--params-b")
    return planner.plan_layout(
        _inventory(args),
        facts,
        tensor_parallel_size=args.tp,
        data_parallel_size=args.dp,
        gpu_memory_utilization=args.gpu_memory_utilization,
        weight_sync=planner.WeightSync(args.weight_sync),
        device=planner.PolicyDevice(args.device),
        sleep_mode=args.sleep_mode,
        training=_training(args) if facts.shape is not None else None,
    )


def _training(args: argparse.Namespace) -> memory.TrainingSetup:
    sequence = args.max_response_length + memory.PROMPT_TOKENS
    return memory.TrainingSetup(
        batch_size=args.batch_size,
        sequence_length=min(sequence, args.max_model_len) if args.max_model_len else sequence,
        lora_rank=args.lora_rank,
        gradient_checkpointing=not args.no_gradient_checkpointing,
        weight_bytes=4 if args.train_dtype == "float32" else 2,
        max_model_len=args.max_model_len,
    )


def _inventory(args: argparse.Namespace) -> planner.GpuInventory:
    if args.gpus is not None:
        return planner.GpuInventory.nvidia(args.gpus, args.gpu_memory_gb)
    if args.device == planner.PolicyDevice.CPU:
        return planner.GpuInventory(0, planner.GpuVendor.NONE)
    probed = planner.probe_gpus()
    return dataclasses.replace(probed, memory_gib=args.gpu_memory_gb or probed.memory_gib)


def _print(args: argparse.Namespace) -> int:
    bad = _bad_number(args)
    try:
        if bad:
            raise planner.LayoutError(*bad)
        plan = plan_from_args(args)
    except planner.LayoutError as error:
        for each in error.each():
            print(f"veri layout: {each.message}; fix: {each.fix}", file=sys.stderr)
        return 2
    print(plan.to_json() if args.json else plan.describe())
    return 0


def _bad_number(args: argparse.Namespace) -> tuple[str, str] | None:
    """Flags no plan can use (the planner assumes sane numbers)."""
    for flag, value in (("--gpus", args.gpus), ("--heads", args.heads), ("--kv-heads", args.kv_heads),
                        ("--tp", args.tp), ("--lora-rank", args.lora_rank), ("--batch-size", args.batch_size),
                        ("--max-response-length", args.max_response_length), ("--max-model-len", args.max_model_len)):
        least = 0 if flag == "--gpus" else 1
        if value is not None and value < least:
            return f"{flag} {value} is not a valid count", f"give {flag} a whole number >= {least}"
    for flag, value in (("--gpu-memory-gb", args.gpu_memory_gb), ("--params-b", args.params_b)):
        if value is not None and value <= 0:
            return f"{flag} {value:g} is not positive", f"give {flag} a number > 0"
    utilization = args.gpu_memory_utilization
    if utilization is not None and not 0 < utilization <= 1:
        return f"--gpu-memory-utilization {utilization:g} is not a fraction", "give a number in (0, 1]"
    return None


def _replicas(text: str) -> int | str:
    if text == planner.AUTO:
        return text
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise argparse.ArgumentTypeError(f"{text!r} is not a replica count (a whole number >= 1, or auto)")
