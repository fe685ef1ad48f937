"""Which TRL GRPOConfig fields the job config's schema sets or refuses: schema data, no TRL import.

Two tables decide what may go in `grpo:` (and what a misplaced top-level key is told):
  `VERI_KNOBS`  GRPOConfig fields a veri knob sets (the job's own name wins; one source of truth).
  `VERI_OWNED`  GRPOConfig fields veri sets itself, or that do nothing when rollouts come from harnesses.
Any other GRPOConfig field passes through. The mapping to TRL's kwargs and the checks against the
installed TRL are the trainer's (veri.services.trainer.grpo.config, veri.services.trainer.grpo.trl_checks).

`StepBatch`: how many tasks and rollouts one step takes, from the batch fields, as TRL 1.16 counts them;
`PASS_THROUGH`: the pass-through fields that matter most, for the reference (docs/reference/config.md).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from veri.core.sampling import UNMATCHED

TRL_BATCH_SIZE = 8  # TrainingArguments' per_device_train_batch_size
PROMPT_TOKENS = 1024  # a training row's first prompt (max_response_length holds all later turns)

# GRPOConfig field -> the veri knob that sets it (dotted: a field of a section).
VERI_KNOBS: dict[str, str] = {
    "num_generations": "rollouts_per_prompt",
    "max_completion_length": "max_response_length",
    "learning_rate": "learning_rate",
    "max_steps": "max_steps",
    "beta": "kl_coef",
    "temperature": "sampling.temperature",
    "top_p": "sampling.top_p",
    "chat_template_kwargs": "chat_template_kwargs",
    "vllm_importance_sampling_clip_max": "importance_sampling_cap",
}

_SERVER = "veri starts the policy server and connects the trainer to it"
_PROXY = "rollouts are sampled through the capture proxy, which sends only sampling.temperature/top_p/max_tokens"
_UNMATCHED = "a job samples with `sampling.temperature` alone: "
_COLOCATE = "only applies to TRL's colocate mode; veri runs vLLM as its own server"

# GRPOConfig field -> why it is not accepted in `grpo:` (and what to set instead).
VERI_OWNED: dict[str, str] = {
    "output_dir": "veri writes checkpoints into the job's folder",
    "use_vllm": "set by `backend:` (vllm: use_vllm=True in server mode; hf: CPU)",
    "vllm_mode": "set by `backend:` (vllm runs in server mode)",
    "use_cpu": "set by `backend:` (hf trains on CPU)",
    "vllm_server_base_url": _SERVER,
    "vllm_server_host": _SERVER,
    "vllm_server_port": _SERVER,
    "vllm_group_port": _SERVER,
    "vllm_tensor_parallel_size": "use the top-level `vllm_tensor_parallel_size` (TRL's field " + _COLOCATE + ")",
    "vllm_gpu_memory_utilization": "use the top-level `vllm_gpu_memory_utilization` (TRL's field " + _COLOCATE + ")",
    "vllm_max_model_length": "use the top-level `max_model_len` (TRL's field " + _COLOCATE + ")",
    "vllm_enable_sleep_mode": "use the top-level `vllm_sleep_mode` (TRL's field " + _COLOCATE + ")",
    "vllm_model_impl": _COLOCATE,
    "vllm_structured_outputs_regex": _PROXY,
    "top_k": _UNMATCHED + UNMATCHED["top_k"],
    "min_p": _UNMATCHED + UNMATCHED["min_p"],
    "repetition_penalty": _UNMATCHED + UNMATCHED["repetition_penalty"],
    "generation_kwargs": _PROXY,
    "use_transformers_continuous_batching": "generation runs in the policy server, not inside TRL",
    "transformers_continuous_batching_config": "generation runs in the policy server, not inside TRL",
    "max_tool_calling_iterations": "use `max_turns` (the harness runs its own tool loop)",
    "reward_weights": "set each reward's `weight:` under `rewards:`",
    "vllm_importance_sampling_correction": "veri corrects off-policy tokens on both backends"
                                           " (`importance_sampling_cap`)",
    "steps_per_generation": "one generation per optimizer step: veri's rollouts are a step's batch",
    "generation_batch_size": "one generation per optimizer step: veri's rollouts are a step's batch",
}


def suggest(key: str, names: Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(names), n=1, cutoff=0.6)
    return f"did you mean `{close[0]}`?" if close else "remove it (no similar name exists)"


# --- the batch ---------------------------------------------------------------------------------------

# TRL 1.16's defaults for the batch fields (GRPOConfig / TrainingArguments; tests/core check them against
# the installed TRL).
TRL_BATCH_DEFAULTS: dict[str, int] = {
    "per_device_train_batch_size": TRL_BATCH_SIZE, "gradient_accumulation_steps": 1, "num_iterations": 1,
}


@dataclass(frozen=True)
class StepBatch:
    """One optimizer step's batch, as TRL 1.16 counts it for veri's single training process.

    TRL's generation batch is per_device_train_batch_size x processes (1) x steps_per_generation rollouts,
    and steps_per_generation defaults to gradient_accumulation_steps (veri refuses setting it or
    generation_batch_size): so a step trains on per_device_train_batch_size x gradient_accumulation_steps
    rollouts, rollouts_per_prompt of them per task. With num_iterations k, TRL trains each generation batch
    k times, one optimizer step each: new rollouts every k steps."""

    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    rollouts_per_prompt: int
    num_iterations: int = 1

    @classmethod
    def of(cls, rollouts_per_prompt: int, grpo: dict[str, Any]) -> StepBatch | None:
        """The batch of a job's `grpo:` section (TRL's defaults where it sets none); None when a batch field
        is not a whole number >= 1 (the `grpo:` check reports it)."""
        values = {name: grpo.get(name, default) for name, default in TRL_BATCH_DEFAULTS.items()}
        if not all(isinstance(value, int) and not isinstance(value, bool) and value >= 1 for value in values.values()):
            return None
        return cls(rollouts_per_prompt=rollouts_per_prompt, **values)

    @property
    def rollouts(self) -> int:
        return self.per_device_train_batch_size * self.gradient_accumulation_steps

    @property
    def tasks(self) -> int | None:
        """Tasks (GRPO groups) per step; None when the rollouts are not whole groups (TRL refuses that)."""
        whole, left = divmod(self.rollouts, self.rollouts_per_prompt)
        return whole if not left and whole else None

    def describe(self, max_steps: int, dataset_size: int | None = None) -> str:
        """One line: the step's tasks and rollouts, how they follow from the fields, and what the job covers."""
        tasks = self.tasks
        if tasks is None:
            return ""
        line = (f"batch: {tasks} task{'s' if tasks != 1 else ''} per step x {self.rollouts_per_prompt} rollouts ="
                f" {self.rollouts} rollouts (grpo.per_device_train_batch_size {self.per_device_train_batch_size}"
                f" x grpo.gradient_accumulation_steps {self.gradient_accumulation_steps}"
                f" / rollouts_per_prompt {self.rollouts_per_prompt})")
        rounds = -(-max_steps // self.num_iterations)
        if self.num_iterations > 1:
            line += (f"; grpo.num_iterations {self.num_iterations}: each batch is trained {self.num_iterations} times,"
                     f" new rollouts every {self.num_iterations} steps")
        sampled = rounds * tasks
        line += f"; {max_steps} steps sample {sampled} tasks"
        if dataset_size:
            line += (f" of the dataset's {dataset_size}" if sampled < dataset_size
                     else f": {sampled / dataset_size:.1f} passes over the dataset's {dataset_size}")
        return line


# The pass-through fields that decide the most, with what each does in veri (the reference prints them
# with TRL's default and what veri sets: scripts/docs/reference.py).
PASS_THROUGH: dict[str, str] = {
    "per_device_train_batch_size": "rollouts in one forward/backward pass; x gradient_accumulation_steps = the"
                                   " step's rollouts (the batch, above)",
    "gradient_accumulation_steps": "passes per optimizer step (TRL's steps_per_generation follows it: veri"
                                   " refuses setting that or generation_batch_size)",
    "num_iterations": "times each step's rollouts are trained (GRPO's mu): k > 1 samples new rollouts every k"
                      " steps and clips the policy ratio at epsilon; must be 1 with max_staleness >= 1",
    "loss_type": "how token losses make the batch's loss: dapo divides by the batch's sampled tokens, so every"
                 " token weighs the same; grpo, sapo and luspo average each row first (a rollout that branches"
                 " into several rows then weighs more: veri validate notes it); dr_grpo, bnpo, cispo: TRL's docs",
    "scale_rewards": "advantages divided by the reward's standard deviation within each group (group), across"
                     " the batch (batch), or not at all (none: Dr. GRPO's advice against a difficulty bias)",
    "epsilon": "the policy ratio's clip range (epsilon_high: its upper side, DAPO's clip-higher)",
    "vllm_importance_sampling_mode": "how the off-policy ratio (trainer / sampler probability of each sampled"
                                     " token) corrects the loss: veri sets token_truncate, truncated at"
                                     " importance_sampling_cap, on both backends; set another here",
}
