"""GPU layout planner: where the trainer and the vLLM policy run, decided once before anything starts.

One node, 1–8 NVIDIA GPUs, or vLLM's CPU build (`device: cpu`):

- 2+ GPUs: GPU 0 trains (TRL's NCCL weight sync needs the trainer and the policy on different CUDA
  devices). The policy gets the rest: TP is a power of two that divides the model's attention AND KV
  head counts (vLLM shards both) — the largest that fits, or with `vllm_data_parallel_size: auto` the
  smallest the model fits on (weights + KV headroom against GPU memory), the rest spent on DP replicas
  of one vLLM server (`--data-parallel-size`). Weight sync `nccl` unless the job forces `filesystem`.
- 1 GPU: the trainer and vLLM share GPU 0, vLLM at a lower memory fraction; weight sync `filesystem`.
- `device: cpu`: no GPU; one vLLM CPU server per replica, weight sync `filesystem`.
- AMD, multi-node and more than 8 GPUs are refused, each `LayoutError` naming the fix.

The plan (`GpuLayout`) holds what the containers need (CUDA_VISIBLE_DEVICES of the trainer and of each
policy server, TP, DP, memory fraction, weight sync, idle GPUs, and notes saying why). It is made once
and handed to the containers as JSON in VERI_GPU_PLAN (`to_json` / `plan_from_env`): the trainer never
re-plans inside its container.

`plan_layout` is pure (inventory + `ModelFacts` + knobs -> plan or `LayoutError`); `probe_gpus` (the
machine) and `model_facts` (the model folder) are the only parts that read anything, so the planner is
tested without GPUs.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, NamedTuple, TypeGuard, cast

from veri.core import envs
from veri.core.placement import AUTO, DataParallelSize, PolicyDevice, WeightSync
from veri.gpu import memory
from veri.gpu.memory import ModelShape, TrainingSetup

TRAINER_GPU = 0
MAX_GPUS = 8
VLLM_DEFAULT_MEMORY_UTILIZATION = 0.9  # vLLM's own --gpu-memory-utilization default
SHARED_MEMORY_UTILIZATION = 0.3  # 1 GPU: vLLM's share by default; the trainer needs the rest
# A replica "fits" when its share of the weights plus this fraction of the GPU (KV cache, activations,
# CUDA graphs) fits in the memory vLLM may use. Rough on purpose: it only picks TP for `auto`.
KV_CACHE_HEADROOM = 0.2
GIB = memory.GIB
_MAX_SAFETENSORS_HEADER = 100 * 2**20  # more is not a safetensors header (e.g. a git-lfs pointer)

class GpuVendor(StrEnum):
    NVIDIA = "nvidia"
    AMD = "amd"
    NONE = "none"  # no accelerator found


class LayoutError(ValueError):
    """The job cannot be laid out: what is wrong, what to change, and the job knob at fault (if one is).
    `also`: the other problems found with it (the planner names every one at once)."""

    def __init__(self, message: str, fix: str, knob: str | None = None, also: tuple[LayoutError, ...] = ()):
        self.message = message
        self.fix = fix
        self.knob = knob
        self.also = also
        super().__init__("; and ".join([f"{message}: {fix}", *(str(other) for other in also)]))

    def each(self) -> list[LayoutError]:
        """This problem and every other one found with it."""
        return [LayoutError(self.message, self.fix, self.knob), *self.also] if self.also else [self]


# --- inputs ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuInventory:
    """What the machine has (or what the user says the target machine has: `veri validate --gpus N`)."""

    count: int
    vendor: GpuVendor = GpuVendor.NVIDIA
    nodes: int = 1
    names: tuple[str, ...] = ()
    memory_gib: float | None = None  # per GPU (the smallest one); None: unknown
    ids: tuple[str, ...] = ()  # CUDA ids of the usable GPUs (CUDA_VISIBLE_DEVICES order); (): 0..count-1

    @classmethod
    def nvidia(cls, count: int, memory_gib: float | None = None) -> GpuInventory:
        return cls(count=count, vendor=GpuVendor.NVIDIA if count else GpuVendor.NONE, memory_gib=memory_gib)

    def device_ids(self) -> tuple[str, ...]:
        return self.ids or tuple(str(index) for index in range(self.count))


@dataclass(frozen=True)
class ModelFacts:
    """What the planner needs to know about the policy model."""

    attention_heads: int
    kv_heads: int
    parameters: int | None = None  # None: unknown
    dtype_bytes: int = 2  # per parameter, as vLLM serves it
    source: str = ""  # where `parameters` came from
    shape: ModelShape | None = None  # the sizes memory depends on (config.json); None: unknown

    @classmethod
    def from_heads(cls, heads: int, kv_heads: int | None = None, parameters: int | None = None) -> ModelFacts:
        return cls(heads, kv_heads or heads, parameters, source="given" if parameters else "")

    @property
    def weight_gib(self) -> float | None:
        return None if self.parameters is None else self.parameters * self.dtype_bytes / GIB

    def heads_text(self) -> str:
        return f"{self.attention_heads} attention heads" + (
            f" and {self.kv_heads} KV heads" if self.kv_heads != self.attention_heads else ""
        )


def model_facts(model_dir: Path) -> ModelFacts:
    """Head counts and size of a transformers model folder (config.json; safetensors headers if present)."""
    config_file = Path(model_dir) / "config.json"
    config = _read_config(config_file)
    text = config.get("text_config") or config  # VLMs keep the language model's config apart
    heads = text.get("num_attention_heads")
    if not _positive_int(heads):
        raise LayoutError(f"{config_file} has no num_attention_heads", "point `model:` at a causal-LM model folder")
    kv_heads = text.get("num_key_value_heads") or heads  # absent: plain multi-head attention
    if not _positive_int(kv_heads):
        raise LayoutError(f"{config_file} has num_key_value_heads {kv_heads!r}", "fix the model's config.json")
    parameters, source = safetensors_parameters(model_dir), "safetensors headers"
    if parameters is None:
        parameters, source = estimate_parameters(text), "estimated from config.json"
    dtype = text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or config.get("dtype")
    return ModelFacts(heads, kv_heads, parameters, _serving_dtype_bytes(dtype), source if parameters else "",
                      ModelShape.from_config(text))


def attention_heads(model_dir: Path) -> int:
    """The attention-head count from a model folder's config.json (text config for VLMs)."""
    return model_facts(model_dir).attention_heads


def safetensors_parameters(model_dir: Path) -> int | None:
    """Parameters counted from the *.safetensors headers (no tensor is loaded); None if any is unreadable."""
    files = _weight_files(Path(model_dir))
    if not files:
        return None
    total = 0
    for file in files:
        header = _safetensors_header(file)
        if header is None:
            return None
        total += sum(math.prod(entry["shape"]) for name, entry in header.items() if name != "__metadata__")
    return total


def estimate_parameters(config: Mapping[str, Any]) -> int | None:
    """A decoder's parameter count from its config (attention, gated MLP, MoE experts, embeddings)."""
    values = [config.get(key) for key in ("hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads")]
    if not all(_positive_int(value) for value in values):
        return None
    hidden, layers, vocab, heads = cast(list[int], values)
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    attention = hidden * head_dim * 2 * (heads + kv_heads)  # q and o, k and v
    experts = config.get("num_local_experts") or config.get("num_experts") or 1
    mlp_width = config.get("moe_intermediate_size") or config.get("intermediate_size") or 4 * hidden
    mlp = 3 * hidden * mlp_width * experts  # gate, up, down
    # untied unless the config says so: over- rather than under-estimate memory
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
    return layers * (attention + mlp) + embeddings


# --- the plan --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyServer:
    """One vLLM server process: the devices it sees and its parallel sizes."""

    cuda_visible_devices: str  # "" on CPU
    tensor_parallel_size: int
    data_parallel_size: int
    gpu_memory_utilization: float | None  # None on CPU
    sleep_mode: bool = False  # --enable-sleep-mode (CUDA only: vLLM's CPU build refuses the flag)

    def vllm_args(self) -> list[str]:
        args = ["--tensor-parallel-size", str(self.tensor_parallel_size)]
        if self.data_parallel_size > 1:
            args += ["--data-parallel-size", str(self.data_parallel_size)]
        if self.gpu_memory_utilization is not None:
            args += ["--gpu-memory-utilization", f"{self.gpu_memory_utilization:g}"]
        if self.sleep_mode:
            args.append("--enable-sleep-mode")
        return args


@dataclass(frozen=True)
class GpuLayout:
    device: PolicyDevice  # CUDA or CPU
    total_gpus: int
    attention_heads: int
    kv_heads: int
    tensor_parallel_size: int
    data_parallel_size: int
    weight_sync: WeightSync  # NCCL or FILESYSTEM
    trainer_gpu: int | None = TRAINER_GPU  # None: the trainer runs on CPU
    policy_gpus: tuple[int, ...] = ()  # indices into gpu_ids
    gpu_memory_utilization: float | None = None  # vLLM's share of each policy GPU; None on CPU
    gpu_ids: tuple[str, ...] = ()  # CUDA id of each GPU index
    notes: tuple[str, ...] = ()  # why
    # vllm_sleep_mode: the policy sleeps from the end of a step's rollouts to the next sync (the trainer's
    # forward, backward and optimizer step get its GPU memory); 1 GPU, or CPU (the same calls, no memory freed)
    sleep_mode: bool = False

    @property
    def shared(self) -> bool:
        """The trainer and the policy share a GPU (1-GPU plan)."""
        return self.trainer_gpu in self.policy_gpus

    @property
    def idle_gpus(self) -> tuple[int, ...]:
        used = {self.trainer_gpu, *self.policy_gpus}
        return tuple(gpu for gpu in range(self.total_gpus) if gpu not in used)

    @property
    def replicas(self) -> list[tuple[int, ...]]:
        """The GPUs of each data-parallel replica (TP GPUs each; none on CPU)."""
        tp, gpus = self.tensor_parallel_size, self.policy_gpus
        return [gpus[i : i + tp] for i in range(0, len(gpus), tp)]

    @property
    def trainer_cuda_visible_devices(self) -> str:
        return "" if self.trainer_gpu is None else self._ids((self.trainer_gpu,))

    @property
    def policy_servers(self) -> list[PolicyServer]:
        """GPU: one server over all policy GPUs (vLLM's own DP); CPU: one server per replica."""
        if self.device == PolicyDevice.CPU:
            return [PolicyServer("", self.tensor_parallel_size, 1, None)] * self.data_parallel_size
        devices = self._ids(self.policy_gpus)
        tp, dp = self.tensor_parallel_size, self.data_parallel_size
        return [PolicyServer(devices, tp, dp, self.gpu_memory_utilization, self.sleep_mode)]

    def describe(self) -> str:
        lines = [self._summary()]
        for server in self.policy_servers:
            where = f"CUDA_VISIBLE_DEVICES={server.cuda_visible_devices}" if server.cuda_visible_devices else "CPU"
            lines.append(f"policy server: {where} vllm serve {' '.join(server.vllm_args())}")
        lines.append(f"weight sync: {self.weight_sync}")
        if self.sleep_mode:
            lines.append("sleep mode: the policy sleeps from the end of each step's rollouts to the next weight sync")
        if self.device == PolicyDevice.CUDA:
            lines.append(f"idle GPUs: {_gpu_list(self.idle_gpus) if self.idle_gpus else 'none'}")
        return "\n".join([*lines, *(f"- {note}" for note in self.notes)])

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> GpuLayout:
        try:
            data = json.loads(text)
            names = {item.name for item in dataclasses.fields(cls)}
            if not isinstance(data, dict) or set(data) != names:
                raise ValueError(f"keys differ from {sorted(names)}")
            return cls(**{
                **data,
                "device": PolicyDevice(data["device"]),
                "weight_sync": WeightSync(data["weight_sync"]),
                **{name: tuple(data[name]) for name in ("policy_gpus", "gpu_ids", "notes")},
            })
        except (TypeError, ValueError) as error:  # includes JSON errors
            raise LayoutError(f"not a GPU plan ({error})", "pass the JSON that `veri layout --json` prints") from error

    def _summary(self) -> str:
        heads = f"({self.attention_heads} attention heads, {self.kv_heads} KV heads)"
        parallel = f"TP={self.tensor_parallel_size} x DP={self.data_parallel_size}"
        if self.device == PolicyDevice.CPU:
            return f"CPU: trainer on CPU; policy (vLLM CPU build) {parallel}, one server per replica {heads}"
        if self.shared:
            return f"1 GPU: trainer and policy (vLLM) {parallel} share GPU {self.trainer_gpu} {heads}"
        return (f"{self.total_gpus} GPUs: trainer on GPU {self.trainer_gpu}; policy (vLLM) {parallel}"
                f" on GPUs {_gpu_list(self.policy_gpus)} {heads}")

    def _ids(self, gpus: tuple[int, ...]) -> str:
        ids = self.gpu_ids or tuple(str(index) for index in range(self.total_gpus))
        return ",".join(ids[gpu] for gpu in gpus)


def plan_from_env(environ: Mapping[str, str] = os.environ) -> GpuLayout:
    """The plan handed to this container in VERI_GPU_PLAN (containers read it; they never re-plan)."""
    text = environ.get(envs.VERI_GPU_PLAN)
    if not text:
        raise LayoutError(f"{envs.VERI_GPU_PLAN} is not set: the GPU plan is made once, before the containers start",
                          "start the job through the stack, which plans it (`veri layout --json` prints one)")
    return GpuLayout.from_json(text)


# --- planning --------------------------------------------------------------------------------------


def plan_layout(
    gpus: GpuInventory,
    model: ModelFacts | int,
    *,
    tensor_parallel_size: int | None = None,
    data_parallel_size: DataParallelSize = None,
    gpu_memory_utilization: float | None = None,
    weight_sync: WeightSync = WeightSync.AUTO,
    device: PolicyDevice = PolicyDevice.AUTO,
    sleep_mode: bool = False,
    training: TrainingSetup | None = None,
) -> GpuLayout:
    """Plan where the trainer and the policy run, or raise `LayoutError` naming the fix.

    `model`: the model's facts (a bare int = its attention-head count, nothing else known). The knobs
    are the job's (None / AUTO: planned): `vllm_tensor_parallel_size`, `vllm_data_parallel_size` (an
    int or "auto"), `vllm_gpu_memory_utilization`, `weight_sync`, `device`, `vllm_sleep_mode`.
    `training`: the trainer's knobs; given, the trainer's and the policy's memory are estimated
    (veri.gpu.memory) and a plan that cannot fit is refused with the fix.
    """
    facts = model if isinstance(model, ModelFacts) else ModelFacts.from_heads(model)
    auto_dp = data_parallel_size == AUTO
    given_dp = data_parallel_size if isinstance(data_parallel_size, int) else None
    knobs = _Knobs(tensor_parallel_size, given_dp, auto_dp, gpu_memory_utilization, WeightSync(weight_sync),
                   sleep_mode, training is not None)
    if device == PolicyDevice.CPU:
        return _plan_cpu(facts, knobs)
    _check_machine(gpus)
    plan = _plan_shared(gpus, facts, knobs) if gpus.count == 1 else _plan_split(gpus, facts, knobs)
    return plan if training is None else _check_memory(plan, gpus, facts, training)


def _check_memory(plan: GpuLayout, gpus: GpuInventory, facts: ModelFacts, training: TrainingSetup) -> GpuLayout:
    """The plan with the memory estimates in its notes, or `LayoutError` naming what makes it fit."""
    if gpus.memory_gib is None or facts.parameters is None or facts.weight_gib is None:
        missing = "the GPU memory (nvidia-smi or --gpu-memory-gb)" if gpus.memory_gib is None else "the model's size"
        return dataclasses.replace(plan, notes=(*plan.notes, f"memory: not estimated ({missing} is unknown)"))
    utilization = plan.gpu_memory_utilization or VLLM_DEFAULT_MEMORY_UTILIZATION
    larger = () if plan.shared else tuple(_tp_choices(plan.total_gpus - 1, facts))
    where = memory.Placement(gpus.memory_gib, plan.tensor_parallel_size, utilization, plan.shared,
                             plan.sleep_mode, larger)
    verdict = memory.fit(facts.parameters, facts.weight_gib, facts.shape, training, where)
    if verdict.refusals:
        first, *others = verdict.refusals
        raise LayoutError(*first, also=tuple(LayoutError(*other) for other in others))
    return dataclasses.replace(plan, notes=(*plan.notes, *verdict.notes))


def parallel_size_problem(
    model: ModelFacts | int, tp: int | None, dp: DataParallelSize, *, free: int = MAX_GPUS - 1
) -> LayoutError | None:
    """What is wrong with explicit TP/DP knobs (None if nothing). `free`: the GPUs the policy may use."""
    facts = model if isinstance(model, ModelFacts) else ModelFacts.from_heads(model)
    if tp is not None and (facts.attention_heads % tp or facts.kv_heads % tp):
        fits = [size for size in _divisors(math.gcd(facts.attention_heads, facts.kv_heads)) if size <= free]
        return LayoutError(
            f"vllm_tensor_parallel_size={tp} does not divide the model's {facts.heads_text()} (vLLM requires it)",
            f"use one of {fits}, or leave it unset to pick the largest that fits",
            "vllm_tensor_parallel_size",
        )
    replicas = dp if isinstance(dp, int) else 1  # None or auto: at least one
    if tp is None and replicas > free:
        return LayoutError(
            f"vllm_data_parallel_size={replicas} needs at least {replicas} GPUs for the policy, but only {free}"
            " are free after the trainer's GPU 0",
            f"lower vllm_data_parallel_size to {free} or less, or set it to auto",
            "vllm_data_parallel_size",
        )
    used = (tp or 1) * replicas
    if used > free:
        return LayoutError(
            f"vllm_tensor_parallel_size x vllm_data_parallel_size = {tp or 1} x {replicas} = {used} GPUs, but only"
            f" {free} are free for the policy (GPU 0 trains; at most {MAX_GPUS} GPUs per node)",
            "lower one of them",
            "vllm_tensor_parallel_size",
        )
    return None


@dataclass(frozen=True)
class _Knobs:
    tp: int | None
    dp: int | None  # None: not given (or auto)
    auto_dp: bool  # vllm_data_parallel_size: auto
    memory_utilization: float | None
    weight_sync: WeightSync
    sleep_mode: bool = False
    estimated: bool = False  # veri.gpu.memory writes the memory notes (and refuses what cannot fit)


def _plan_split(gpus: GpuInventory, facts: ModelFacts, knobs: _Knobs) -> GpuLayout:
    """2+ GPUs: GPU 0 trains, the policy gets TP x DP of the rest."""
    free = gpus.count - 1
    error = parallel_size_problem(facts, knobs.tp, knobs.dp, free=free)  # auto: checked as 1
    if error:
        raise error
    if knobs.sleep_mode:
        raise LayoutError(f"vllm_sleep_mode frees the policy's GPU memory for the trainer, but with {gpus.count} GPUs"
                          f" the trainer has GPU {TRAINER_GPU} to itself: sleeping would only slow each step",
                          "remove vllm_sleep_mode (it is for 1 GPU shared by the trainer and the policy)",
                          "vllm_sleep_mode")
    utilization = knobs.memory_utilization or VLLM_DEFAULT_MEMORY_UTILIZATION
    if knobs.auto_dp:
        tp, dp, why, fitted = _fill_with_replicas(free, facts, knobs.tp, gpus.memory_gib, utilization)
    else:
        tp, dp, why, fitted = _given_replicas(free, facts, knobs.tp, knobs.dp or 1)
    sync = WeightSync.FILESYSTEM if knobs.weight_sync == WeightSync.FILESYSTEM else WeightSync.NCCL
    rough = [] if knobs.estimated else _memory_notes(facts, tp, gpus.memory_gib, utilization)
    notes = [why, *rough, *_idle_notes(free, tp, dp, fitted)]
    if dp > 1:
        notes.append(f"one vLLM server with --data-parallel-size {dp}; the proxy pins each rollout to one rank"
                     " (X-data-parallel-rank header)")
    notes.append(f"weight sync {sync}: " + ("forced by weight_sync" if sync == WeightSync.FILESYSTEM
                                            else "the trainer and the policy are on different GPUs (TRL server mode)"))
    policy = tuple(range(TRAINER_GPU + 1, TRAINER_GPU + 1 + tp * dp))
    return GpuLayout(PolicyDevice.CUDA, gpus.count, facts.attention_heads, facts.kv_heads, tp, dp, sync,
                     TRAINER_GPU, policy, utilization, gpus.device_ids(), tuple(notes))


def _plan_shared(gpus: GpuInventory, facts: ModelFacts, knobs: _Knobs) -> GpuLayout:
    """1 GPU: the trainer and vLLM share it (vLLM capped to a fraction of the memory)."""
    if (knobs.tp or 1) > 1 or (knobs.dp or 1) > 1:
        raise LayoutError("with 1 GPU the policy runs TP=1 x DP=1 beside the trainer",
                          "remove vllm_tensor_parallel_size / vllm_data_parallel_size, or run on more GPUs",
                          "vllm_tensor_parallel_size" if (knobs.tp or 1) > 1 else "vllm_data_parallel_size")
    if knobs.weight_sync == WeightSync.NCCL:
        raise LayoutError("weight_sync: nccl needs the trainer and the policy on different GPUs; this box has 1",
                          "set weight_sync: filesystem (or auto)", "weight_sync")
    utilization = knobs.memory_utilization or SHARED_MEMORY_UTILIZATION
    notes = [
        (f"1 GPU: the trainer and vLLM share GPU {TRAINER_GPU}; vLLM may use {utilization:.0%} of its memory"
         " (vllm_gpu_memory_utilization), the trainer the rest"),
        *([] if knobs.estimated else _memory_notes(facts, 1, gpus.memory_gib, utilization)),
        "weight sync filesystem: TRL's NCCL communicator cannot connect two processes on one device",
        ("vllm_sleep_mode: vLLM sleeps (level 1: weights to host memory, KV cache freed) from the end of each"
         " step's rollouts until the next weight sync, so the trainer's step gets its memory"
         if knobs.sleep_mode else
         "vllm_sleep_mode: true would free vLLM's memory during the trainer's step (--enable-sleep-mode)"),
    ]
    return GpuLayout(PolicyDevice.CUDA, 1, facts.attention_heads, facts.kv_heads, 1, 1, WeightSync.FILESYSTEM,
                     TRAINER_GPU, (TRAINER_GPU,), utilization, gpus.device_ids(), tuple(notes), knobs.sleep_mode)


def _plan_cpu(facts: ModelFacts, knobs: _Knobs) -> GpuLayout:
    """`device: cpu`: vLLM's CPU build, one server per replica; no GPU is planned."""
    if (knobs.tp or 1) > 1:
        raise LayoutError("device: cpu runs each vLLM CPU server with TP=1",
                          "remove vllm_tensor_parallel_size (raise vllm_data_parallel_size for more servers)",
                          "vllm_tensor_parallel_size")
    if knobs.weight_sync == WeightSync.NCCL:
        raise LayoutError("weight_sync: nccl needs GPUs; device: cpu syncs weights through the filesystem",
                          "set weight_sync: filesystem (or auto)", "weight_sync")
    if knobs.memory_utilization is not None:
        raise LayoutError("vllm_gpu_memory_utilization does nothing with device: cpu (no GPU memory to share)",
                          "remove it (vLLM's CPU build sizes its KV cache with VLLM_CPU_KVCACHE_SPACE)",
                          "vllm_gpu_memory_utilization")
    dp = knobs.dp or 1
    notes = [f"device: cpu: {dp} vLLM CPU server(s), one per replica; no GPU is used",
             "weight sync filesystem: NCCL needs GPUs"]
    if knobs.auto_dp:
        notes.insert(1, "vllm_data_parallel_size: auto fills free GPUs; on CPU it means 1 server"
                        " (set a number for more)")
    if knobs.sleep_mode:
        notes.append("vllm_sleep_mode: each server sleeps from the end of a step's rollouts to the next sync, as on"
                     " 1 GPU; the CPU build pauses its engine but frees no memory (it has no sleep allocator)")
    return GpuLayout(PolicyDevice.CPU, 0, facts.attention_heads, facts.kv_heads, 1, dp, WeightSync.FILESYSTEM,
                     None, (), None, (), tuple(notes), knobs.sleep_mode)


class _Parallel(NamedTuple):
    tp: int
    dp: int
    why: str
    fitted: bool  # DP filled the free GPUs (idle ones cannot hold another replica)


def _given_replicas(free: int, facts: ModelFacts, tp: int | None, dp: int) -> _Parallel:
    if tp is not None:
        return _Parallel(tp, dp, f"TP={tp} set by vllm_tensor_parallel_size", False)
    tp = max(_tp_choices(free // dp, facts))
    return _Parallel(tp, dp, f"TP={tp}: the largest power of two <= {free // dp} that divides the"
                             f" {facts.heads_text()}", False)


def _fill_with_replicas(
    free: int, facts: ModelFacts, tp: int | None, memory_gib: float | None, utilization: float
) -> _Parallel:
    """`vllm_data_parallel_size: auto`: the smallest TP the model fits on, then as many replicas as fit."""
    if tp is not None:
        return _Parallel(tp, free // tp, f"DP={free // tp} (auto): replicas of the given TP={tp}", True)
    choices = _tp_choices(free, facts)
    if memory_gib is None or facts.weight_gib is None:
        missing = "the GPU memory (nvidia-smi or --gpu-memory-gb)" if memory_gib is None else "the model's size"
        return _Parallel(max(choices), 1, f"vllm_data_parallel_size: auto needs {missing}, which is unknown"
                                          f" here: planned the largest TP={max(choices)} and DP=1", False)
    for size in choices:
        if _fits(facts.weight_gib / size, memory_gib, utilization):
            return _Parallel(size, free // size, f"DP={free // size} (auto): TP={size} is the smallest power of"
                                                 f" two the model fits on that divides the {facts.heads_text()}", True)
    return _Parallel(max(choices), 1, f"DP=1 (auto): the model does not fit even at the largest TP={max(choices)}",
                     True)


def _memory_notes(facts: ModelFacts, tp: int, memory_gib: float | None, utilization: float) -> list[str]:
    if memory_gib is None or facts.weight_gib is None or facts.parameters is None:
        return []
    per_gpu, usable = facts.weight_gib / tp, memory_gib * utilization
    text = (f"~{per_gpu:.1f} GiB of weights per policy GPU at TP={tp} ({facts.parameters / 1e9:.2f}B parameters,"
            f" {facts.source}) + {KV_CACHE_HEADROOM:.0%} KV-cache headroom, of {usable:.1f} GiB usable"
            f" ({utilization:g} x {memory_gib:g} GiB)")
    if _fits(per_gpu, memory_gib, utilization):
        return [text]
    return [(f"warning: may not fit: {text}; use more or larger GPUs, raise vllm_gpu_memory_utilization,"
             " or pick a smaller model")]


def _fits(weights_per_gpu_gib: float, memory_gib: float, utilization: float) -> bool:
    return weights_per_gpu_gib + KV_CACHE_HEADROOM * memory_gib <= utilization * memory_gib


def _idle_notes(free: int, tp: int, dp: int, fitted: bool) -> list[str]:
    idle = free - tp * dp
    if not idle:
        return []
    if fitted:
        return [f"{idle} GPU(s) idle: another replica needs TP={tp} GPUs"]
    if free // tp > dp:
        hint = f"set vllm_data_parallel_size: {free // tp} (or auto) to run {free // tp} replicas of TP={tp}"
    else:
        hint = f"set vllm_data_parallel_size: {free} to run {free} replicas of TP=1"
    return [f"{idle} GPU(s) idle; if the model fits on fewer GPUs, {hint}"]


def _tp_choices(limit: int, facts: ModelFacts) -> list[int]:
    """Powers of two <= limit dividing both head counts, ascending (1 always qualifies)."""
    sizes = [2**power for power in range(MAX_GPUS.bit_length()) if 2**power <= max(limit, 1)]
    return [size for size in sizes if facts.attention_heads % size == 0 and facts.kv_heads % size == 0]


def _check_machine(gpus: GpuInventory) -> None:
    cpu_hint = "use `backend: hf` to train on CPU, or `device: cpu` for vLLM's CPU build"
    if gpus.vendor == GpuVendor.AMD:
        raise LayoutError(
            "AMD GPUs are not supported: the vLLM policy and TRL's NCCL weight sync need NVIDIA GPUs",
            f"run on a box with 1–{MAX_GPUS} NVIDIA GPUs, or {cpu_hint}",
        )
    if gpus.nodes > 1:
        raise LayoutError(f"multi-node jobs are not supported ({gpus.nodes} nodes)",
                          f"run on one node with 1–{MAX_GPUS} GPUs")
    if gpus.count == 0:
        raise LayoutError(f"no NVIDIA GPU found: backend vllm needs 1–{MAX_GPUS} NVIDIA GPUs on one node",
                          f"run on a GPU box, or {cpu_hint}")
    if gpus.count > MAX_GPUS:
        raise LayoutError(
            f"{gpus.count} GPUs visible; veri uses 1–{MAX_GPUS} on one node",
            f"set {envs.CUDA_VISIBLE_DEVICES} to the GPUs this job may use",
        )


# --- reading the machine and the model folder ------------------------------------------------------


def probe_gpus() -> GpuInventory:
    """What this machine has: nvidia-smi first (honouring CUDA_VISIBLE_DEVICES), then ROCm."""
    nodes = int(os.environ.get(envs.SLURM_JOB_NUM_NODES) or 1)
    if shutil.which("nvidia-smi"):
        found = _nvidia_smi()
        visible = os.environ.get(envs.CUDA_VISIBLE_DEVICES)
        ids: tuple[str, ...] = ()
        if visible is not None:
            found, ids = _visible(found, [item.strip() for item in visible.split(",") if item.strip()])
        memory = min((mib for _, mib in found if mib), default=None)
        return GpuInventory(len(found), GpuVendor.NVIDIA if found else GpuVendor.NONE, nodes,
                            tuple(name for name, _ in found), memory / 1024 if memory else None, ids)
    if shutil.which("rocm-smi") or Path("/dev/kfd").exists():
        return GpuInventory(0, GpuVendor.AMD, nodes)
    return GpuInventory(0, GpuVendor.NONE, nodes)


def _visible(found: list[Any], wanted: list[str]) -> tuple[list[Any], tuple[str, ...]]:
    """The GPUs CUDA_VISIBLE_DEVICES lets this job use, and their ids."""
    if all(item.isdigit() for item in wanted):
        ids = tuple(item for item in wanted if int(item) < len(found))
        return [found[int(item)] for item in ids], ids
    return found[: len(wanted)], tuple(wanted[: len(found)])  # UUIDs or MIG ids: assume nvidia-smi's order


def _nvidia_smi() -> list[tuple[str, float | None]]:
    """(name, memory in MiB) per GPU."""
    try:
        result = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=30, check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return []  # the driver is not usable: same as no GPU (the planner says what is needed)
    found: list[tuple[str, float | None]] = []
    for line in filter(None, map(str.strip, result.stdout.splitlines())):
        name, _, memory = line.rpartition(",")
        try:
            found.append((name.strip(), float(memory)))
        except ValueError:  # "[N/A]"
            found.append((name.strip() or line, None))
    return found


def _read_config(config_file: Path) -> dict[str, Any]:
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError) as error:
        raise LayoutError(f"cannot read {config_file} ({error})", "point `model:` at a transformers model folder") \
            from error
    if not isinstance(config, dict):
        raise LayoutError(f"{config_file} is not a JSON object", "point `model:` at a transformers model folder")
    return config


def _weight_files(model_dir: Path) -> list[Path]:
    """The safetensors files holding the weights: the index's shards, else every *.safetensors."""
    index = model_dir / "model.safetensors.index.json"
    try:
        shards = set(json.loads(index.read_text())["weight_map"].values())
        return [model_dir / name for name in sorted(shards)]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return sorted(model_dir.glob("*.safetensors"))


def _safetensors_header(file: Path) -> dict[str, Any] | None:
    # A safetensors file starts with the JSON header's length (8 bytes, little-endian), then the header.
    try:
        with file.open("rb") as stream:
            size = int.from_bytes(stream.read(8), "little")
            if not 0 < size <= _MAX_SAFETENSORS_HEADER:
                return None
            header = json.loads(stream.read(size))
    except (OSError, ValueError):
        return None
    return header if isinstance(header, dict) else None


def _serving_dtype_bytes(dtype: Any) -> int:
    # vLLM's dtype "auto" serves float32 checkpoints in half precision: 2 bytes unless the model is 8-bit
    return 1 if isinstance(dtype, str) and ("float8" in dtype or dtype in ("int8", "uint8")) else 2


def _positive_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _gpu_list(gpus: tuple[int, ...]) -> str:
    return ",".join(map(str, gpus))
