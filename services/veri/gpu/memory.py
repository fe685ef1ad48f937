"""GPU memory estimates for the plan: the trainer's peak on GPU 0 and each policy GPU's (vLLM) budget.

Rough on purpose (a few GiB either way): enough to refuse, before anything starts, a plan that cannot
fit, and to name the knob that makes it fit. Pure: numbers in, numbers and sentences out (veri.gpu.planner
calls `fit`; the model's shape comes from its config.json, the job's knobs from `TrainingSetup`).

The trainer (TRL 1.16's GRPOTrainer on GPU 0), checked against one real step on an H200 for Qwen3
0.6B-8B, full and LoRA, 4k and 8k completions (bench/device_check.py; the figures in docs/gpu.md):
    weights       parameters x bytes: TRL loads the model in float32 unless `grpo: {model_init_kwargs:
                  {dtype: bfloat16}}` says otherwise
    AdamW         two states per trained parameter, in the parameter's dtype
    reference     a frozen copy when kl_coef > 0 (full fine-tune; LoRA disables its adapter instead)
    LoRA          `lora_rank` adapters on every linear layer (float32: peft upcasts them) + grads + AdamW
    activations   per micro-batch (grpo.per_device_train_batch_size rows of the prompt + completion):
                  `activation_bytes`
    gradients     as the weights (full fine-tune); they grow while the activations are freed, so the
                  step's peak holds the larger of the two
The policy (vLLM, per GPU of a replica): its weights / TP, CUDA graphs and profiled activations, and
the KV cache in what is left of `gpu_memory_utilization` x the GPU, which must hold one sequence of
max_model_len tokens (vLLM refuses to start otherwise).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, cast

from veri.core.grpo import PROMPT_TOKENS, TRL_BATCH_SIZE

GIB = 2**30
TRAINER_OVERHEAD_GIB = 1.5  # CUDA context (0.75 GiB on an H200), cuBLAS workspace, autocast's copies
# A recomputed block's saved tensors and their gradients, in blocks: the slope of the measured peak over
# the tokens of a micro-batch is the layer inputs + 2.0-2.2 blocks for Qwen3 0.6B-8B (bench/device_check.py)
BLOCK_BACKWARD_FACTOR = 2.25
# What the CUDA allocator reserves beyond what it allocates, with expandable segments (the GPU trainer's
# setting): 1.02-1.06x measured for Qwen3 0.6B-8B
ALLOCATOR_SLACK = 0.05
POLICY_OVERHEAD_GIB = 2.0  # per policy GPU: CUDA context and graphs, profiled activations, NCCL buffers
SLEEPING_POLICY_GIB = 1.0  # what a sleeping vLLM keeps on the GPU (context, graphs)
SUGGESTED_LORA_RANK = 64
MAX_UTILIZATION = 0.95  # the most vllm_gpu_memory_utilization a fix suggests


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a decoder that memory depends on (config.json)."""

    hidden: int
    layers: int
    intermediate: int
    vocab: int
    heads: int
    kv_heads: int
    head_dim: int
    max_positions: int | None = None
    checkpoint_bytes: int = 2  # the checkpoint's dtype (TRL's dtype "auto" loads that)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ModelShape | None:
        """None when the config lacks a size (then nothing is estimated)."""
        names = ("hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads")
        values = [config.get(name) for name in names]
        if not all(isinstance(value, int) and value > 0 for value in values):
            return None
        hidden, layers, vocab, heads = cast(list[int], values)
        kv_heads = config.get("num_key_value_heads") or heads
        width = config.get("moe_intermediate_size") or config.get("intermediate_size") or 4 * hidden
        positions = config.get("max_position_embeddings")
        dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
        return cls(hidden, layers, width, vocab, heads, kv_heads, config.get("head_dim") or hidden // heads,
                   positions if isinstance(positions, int) else None, 4 if dtype == "float32" else 2)

    def lora_parameters(self, rank: int) -> int:
        """LoRA's A and B on every linear layer of every block (peft's target_modules="all-linear")."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        sides = (self.hidden + q) * 2 + (self.hidden + kv) * 2 + (self.hidden + self.intermediate) * 3
        return self.layers * rank * sides

    def activation_elements(self) -> int:
        """Tensors one block saves for backward, per token: norms, q/k/v, attention out, the gated MLP."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return 4 * self.hidden + 2 * q + 2 * kv + 4 * self.intermediate

    def kv_bytes_per_token(self, tp: int = 1, dtype_bytes: int = 2) -> int:
        """K and V of every layer for one token, on one of `tp` GPUs (each holds its share of the KV heads)."""
        return 2 * self.layers * max(1, self.kv_heads // tp) * self.head_dim * dtype_bytes


@dataclass(frozen=True)
class TrainingSetup:
    """The job's knobs the trainer's memory depends on (JobConfig.training_setup; `veri layout`'s flags)."""

    batch_size: int = TRL_BATCH_SIZE  # grpo.per_device_train_batch_size
    sequence_length: int = 4096 + PROMPT_TOKENS  # a row: prompt + max_response_length (<= max_model_len)
    lora_rank: int | None = None
    gradient_checkpointing: bool = True  # TRL's GRPOConfig default
    weight_bytes: int = 4  # TRL loads float32 unless grpo.model_init_kwargs.dtype says otherwise
    activation_bytes: int = 2  # bf16 autocast (TRL's default); 4 with bf16: false
    reference_model: bool = False  # kl_coef > 0
    max_model_len: int | None = None  # vLLM's --max-model-len (None: the model's positions)


@dataclass(frozen=True)
class TrainerEstimate:
    parts: tuple[tuple[str, float], ...]  # (what, GiB), in the order they are shown
    persistent_gib: float  # what stays between steps: weights, optimizer states, the reference copy

    @property
    def total_gib(self) -> float:
        return sum(gib for _, gib in self.parts)

    def text(self) -> str:
        return f"~{self.total_gib:.1f} GiB (" + ", ".join(f"{name} {gib:.1f}" for name, gib in self.parts if gib) + ")"


def trainer_estimate(parameters: int, shape: ModelShape, setup: TrainingSetup) -> TrainerEstimate:
    """The trainer's peak on its GPU during a step (forward, backward, optimizer).

    Measured on an H200 (bench/device_check.py, docs/gpu.md): the peak is reached as the backward pass
    starts, with the weights, AdamW's states and every activation held; the gradients grow as the
    activations are freed, so a full fine-tune's step holds the larger of the two, not both."""
    weights = parameters * setup.weight_bytes / GIB
    if setup.lora_rank is None:
        trained = {"AdamW": 2 * weights, "reference": weights if setup.reference_model else 0.0}
        gradients = weights
        what = "weights"
    else:
        adapter = shape.lora_parameters(setup.lora_rank) * 4 / GIB  # float32 adapters
        trained = {"LoRA + grads + AdamW": 4 * adapter}
        gradients = 0.0
        what = "frozen weights"
    activations = activation_bytes(shape, setup) / GIB
    peak = ("activations", activations) if activations >= gradients else ("gradients", gradients)
    held = weights + sum(trained.values()) + peak[1]
    parts = ((what, weights), *trained.items(), peak, ("allocator", ALLOCATOR_SLACK * held),
             ("CUDA overhead", TRAINER_OVERHEAD_GIB))
    persistent = weights + sum(trained.values())
    if setup.lora_rank is not None:
        persistent -= trained["LoRA + grads + AdamW"] / 4  # the adapters' grads go after each step
    return TrainerEstimate(parts, persistent + TRAINER_OVERHEAD_GIB)


def activation_bytes(shape: ModelShape, setup: TrainingSetup) -> float:
    """What one micro-batch's forward keeps for the backward, at its peak.

    With gradient checkpointing (TRL's default): each layer's input, in the residual stream's dtype
    (the weights' under autocast: float32 weights keep a float32 stream), plus the block being
    recomputed with its gradients, BLOCK_BACKWARD_FACTOR of one block's tensors. Without it, every
    block's tensors. TRL scores the completion in chunks, so the logits never add a full
    tokens x vocab tensor."""
    tokens = setup.batch_size * setup.sequence_length
    block = shape.activation_elements() * tokens * setup.activation_bytes
    if not setup.gradient_checkpointing:
        return shape.layers * block + (BLOCK_BACKWARD_FACTOR - 1) * block
    residual = max(setup.weight_bytes, setup.activation_bytes)
    return shape.layers * shape.hidden * tokens * residual + BLOCK_BACKWARD_FACTOR * block


class PolicyEstimate(NamedTuple):
    weights_gib: float  # per GPU
    usable_gib: float  # utilization x memory
    kv_cache_gib: float  # what is left for the KV cache (may be negative)
    kv_tokens: int  # tokens it holds
    needed_tokens: int | None  # one max_model_len sequence (None: unknown)

    @property
    def fits(self) -> bool:
        return self.kv_cache_gib > 0 and (self.needed_tokens is None or self.kv_tokens >= self.needed_tokens)

    def text(self, tp: int, utilization: float, memory_gib: float) -> str:
        kv = (f"KV cache {self.kv_cache_gib:.1f} GiB = {self.kv_tokens:,} tokens"
              + (f" (max_model_len {self.needed_tokens:,})" if self.needed_tokens else ""))
        return (f"~{self.weights_gib:.1f} GiB of weights per policy GPU at TP={tp} + {POLICY_OVERHEAD_GIB:g} GiB"
                f" overhead + {kv}, of {self.usable_gib:.1f} GiB ({utilization:g} x {memory_gib:g} GiB)")


def policy_estimate(weights_gib: float, shape: ModelShape | None, *, tp: int, memory_gib: float,
                    utilization: float, max_model_len: int | None) -> PolicyEstimate:
    per_gpu = weights_gib / tp
    usable = utilization * memory_gib
    kv = usable - per_gpu - POLICY_OVERHEAD_GIB
    tokens = int(max(kv, 0) * GIB // shape.kv_bytes_per_token(tp)) if shape else 0
    needed = (max_model_len or shape.max_positions) if shape else None
    return PolicyEstimate(per_gpu, usable, kv, tokens, needed)


# --- the verdict -------------------------------------------------------------------------------------


class Refusal(NamedTuple):
    message: str
    fix: str
    knob: str | None


@dataclass(frozen=True)
class Verdict:
    notes: tuple[str, ...]
    refusals: tuple[Refusal, ...] = ()  # every part that cannot fit (the policy's, the trainer's), each with its fix

    @property
    def refusal(self) -> Refusal | None:
        return self.refusals[0] if self.refusals else None


@dataclass(frozen=True)
class Placement:
    """Where the plan puts things, as far as memory goes."""

    memory_gib: float  # per GPU
    tp: int
    utilization: float  # vLLM's share of each policy GPU
    shared: bool = False  # 1 GPU: the trainer and vLLM share it
    sleep_mode: bool = False
    larger_tp: tuple[int, ...] = ()  # TPs the free GPUs and head counts would allow, ascending


def fit(parameters: int, weight_gib: float, shape: ModelShape | None, setup: TrainingSetup | None,
        where: Placement) -> Verdict:
    """The estimates as notes; a refusal naming the fix for each of the policy and the trainer that cannot
    fit (both at once, so one run of `veri validate` names every change). `setup` None: the policy only
    (nothing known about the training)."""
    policy = policy_estimate(weight_gib, shape, tp=where.tp, memory_gib=where.memory_gib,
                             utilization=where.utilization, max_model_len=setup.max_model_len if setup else None)
    notes = [f"policy memory: {policy.text(where.tp, where.utilization, where.memory_gib)}"]
    refusals = [] if policy.fits else [_policy_refusal(policy, weight_gib, shape, where)]
    if setup is None or shape is None:
        notes.append("trainer memory: not estimated (needs the model's config.json and the job's knobs)")
        return Verdict(tuple(notes), tuple(refusals))
    trainer = trainer_estimate(parameters, shape, setup)
    budget = _trainer_budget(where)
    notes.append(f"trainer memory on GPU 0: {trainer.text()}, of {budget:.1f} GiB" + _budget_why(where))
    if not _trainer_fits(trainer, where):
        refusals.append(_trainer_refusal(trainer, parameters, weight_gib, shape, setup, where))
    return Verdict(tuple(notes), tuple(refusals))


def _trainer_budget(where: Placement) -> float:
    if not where.shared:
        return where.memory_gib
    if where.sleep_mode:
        return where.memory_gib - SLEEPING_POLICY_GIB
    return where.memory_gib * (1 - where.utilization)


def _budget_why(where: Placement) -> str:
    if not where.shared:
        return " (GPU 0 is the trainer's alone)"
    if where.sleep_mode:
        return (f" while vLLM sleeps; its weights and optimizer states stay beside vLLM's"
                f" {where.utilization:g} x {where.memory_gib:g} GiB while it serves")
    return f" (what vLLM's {where.utilization:g} leaves of the shared GPU)"


def _trainer_fits(trainer: TrainerEstimate, where: Placement) -> bool:
    if trainer.total_gib > _trainer_budget(where):
        return False
    return not (where.shared and where.sleep_mode
                and trainer.persistent_gib > where.memory_gib * (1 - where.utilization))


def _trainer_refusal(trainer: TrainerEstimate, parameters: int, weight_gib: float, shape: ModelShape,
                     setup: TrainingSetup, where: Placement) -> Refusal:
    def fits(candidate: TrainingSetup, place: Placement = where) -> bool:
        return _trainer_fits(trainer_estimate(parameters, shape, candidate), place)

    options: list[tuple[str, str, TrainingSetup]] = []
    if setup.lora_rank is None:
        options.append(("lora_rank", f"set `lora_rank: {SUGGESTED_LORA_RANK}` (train a LoRA adapter)",
                        replace(setup, lora_rank=SUGGESTED_LORA_RANK, reference_model=False)))
    if setup.weight_bytes > 2:
        options.append(("grpo", "load the weights in bfloat16: `grpo: {model_init_kwargs: {dtype: bfloat16}}`"
                                " (TRL's default is float32)", replace(setup, weight_bytes=2)))
    if not setup.gradient_checkpointing:
        options.append(("grpo", "`grpo: {gradient_checkpointing: true}`",
                        replace(setup, gradient_checkpointing=True)))
    alone = [(knob, text) for knob, text, candidate in options if fits(candidate)]
    smaller = _largest_batch(lambda size: fits(replace(setup, batch_size=size)), setup.batch_size)
    if smaller:
        alone.append(("grpo", f"`grpo: {{per_device_train_batch_size: {smaller}}}` (raise"
                              " gradient_accumulation_steps to keep the batch)"))
    if where.shared and not where.sleep_mode and fits(setup, replace(where, sleep_mode=True)):
        alone.append(("vllm_sleep_mode", "`vllm_sleep_mode: true` (vLLM frees the GPU during the trainer's step)"))
    message = f"the trainer needs {trainer.text()} on GPU 0 but has {_trainer_budget(where):.1f} GiB" \
              + _budget_why(where)
    if where.shared and where.sleep_mode and trainer.total_gib <= _trainer_budget(where):
        message = (f"the trainer keeps ~{trainer.persistent_gib:.1f} GiB (weights, optimizer states) on the shared"
                   f" GPU while vLLM serves with {where.utilization:g} x {where.memory_gib:g} GiB: both do not fit")
        alone.append(("vllm_gpu_memory_utilization", "lower `vllm_gpu_memory_utilization`"))
    if alone:
        return Refusal(message, "fits with any of: " + "; ".join(text for _, text in alone), alone[0][0])
    together = setup
    for _, _, candidate in options:
        together = replace(together, lora_rank=candidate.lora_rank or together.lora_rank,
                           weight_bytes=min(candidate.weight_bytes, together.weight_bytes),
                           gradient_checkpointing=together.gradient_checkpointing or candidate.gradient_checkpointing,
                           reference_model=together.reference_model and candidate.reference_model)
    steps = [text for _, text, _ in options]
    place = where
    if where.shared:  # 1 GPU: vLLM asleep during the step, and no more of the GPU than it needs
        place = replace(where, sleep_mode=True, utilization=_least_utilization(weight_gib, shape, setup, where))
        steps += [] if where.sleep_mode else ["`vllm_sleep_mode: true`"]
        if place.utilization < where.utilization:
            steps.append(f"`vllm_gpu_memory_utilization: {place.utilization:g}`")
    batch = _largest_batch(lambda size: fits(replace(together, batch_size=size), place), setup.batch_size + 1)
    if steps and batch:
        if batch < setup.batch_size:
            steps.append(f"`grpo: {{per_device_train_batch_size: {batch}}}`")
        knob = options[0][0] if options else "vllm_sleep_mode"
        return Refusal(message, "fits with all of: " + "; ".join(steps), knob)
    more = ("2+ GPUs (GPU 0 then trains alone), a shorter max_model_len" if where.shared
            else f"a GPU 0 with at least {math.ceil(trainer.total_gib / 0.95)} GiB")
    return Refusal(message, f"use {more}, or a smaller model", "model")


def _least_utilization(weight_gib: float, shape: ModelShape, setup: TrainingSetup, where: Placement) -> float:
    """The smallest vllm_gpu_memory_utilization (in 0.05 steps) the policy fits in; the current one if none."""
    for utilization in _utilizations():
        if utilization < where.utilization and policy_estimate(
                weight_gib, shape, tp=where.tp, memory_gib=where.memory_gib, utilization=utilization,
                max_model_len=setup.max_model_len).fits:
            return utilization
    return where.utilization


def _utilizations() -> list[float]:
    return [round(step * 0.05, 2) for step in range(1, int(MAX_UTILIZATION / 0.05 + 1e-9) + 1)]


def _largest_batch(fits: Any, below: int) -> int | None:
    """The largest batch size < `below` that fits (None if not even 1)."""
    for size in range(below - 1, 0, -1):
        if fits(size):
            return size
    return None


def _policy_refusal(policy: PolicyEstimate, weight_gib: float, shape: ModelShape | None,
                    where: Placement) -> Refusal:
    fixes = []
    for utilization in _utilizations():
        if utilization > where.utilization and policy_estimate(
                weight_gib, shape, tp=where.tp, memory_gib=where.memory_gib, utilization=utilization,
                max_model_len=policy.needed_tokens).fits:
            fixes.append(("vllm_gpu_memory_utilization", f"`vllm_gpu_memory_utilization: {utilization:g}`"
                          + (" (and `vllm_sleep_mode: true`, so the trainer gets the GPU for its step)"
                             if where.shared and not where.sleep_mode else "")))
            break
    for tp in where.larger_tp:
        if tp > where.tp and policy_estimate(weight_gib, shape, tp=tp, memory_gib=where.memory_gib,
                                             utilization=where.utilization,
                                             max_model_len=policy.needed_tokens).fits:
            fixes.append(("vllm_tensor_parallel_size", f"`vllm_tensor_parallel_size: {tp}`"))
            break
    if policy.kv_cache_gib <= 0:
        message = (f"the policy's weights ({policy.weights_gib:.1f} GiB per GPU at TP={where.tp}) and"
                   f" {POLICY_OVERHEAD_GIB:g} GiB overhead do not fit in {policy.usable_gib:.1f} GiB"
                   f" ({where.utilization:g} x {where.memory_gib:g} GiB)")
    else:
        message = (f"the policy's KV cache ({policy.kv_cache_gib:.1f} GiB = {policy.kv_tokens:,} tokens) cannot"
                   f" hold one sequence of max_model_len {policy.needed_tokens:,} tokens (vLLM refuses to start)")
        if policy.kv_tokens >= 1024:
            fixes.insert(0, ("max_model_len", f"`max_model_len: {policy.kv_tokens // 1024 * 1024}`"))
    if not fixes:
        fixes.append(("model", "use more or larger GPUs, or a smaller model"))
    return Refusal(message, "fits with any of: " + "; ".join(text for _, text in fixes), fixes[0][0])
