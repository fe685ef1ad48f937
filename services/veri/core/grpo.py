"""Which TRL GRPOConfig fields the job config's schema sets or refuses: schema data, no TRL import.

Two tables decide what may go in `grpo:` (and what a misplaced top-level key is told):
  `VERI_KNOBS`  GRPOConfig fields a veri knob sets (the job's own name wins; one source of truth).
  `VERI_OWNED`  GRPOConfig fields veri sets itself, or that do nothing when rollouts come from harnesses.
Any other GRPOConfig field passes through. The mapping to TRL's kwargs and the checks against the
installed TRL are the trainer's (veri.trainer.grpo.config, veri.trainer.grpo.checks).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from veri.core.sampling import UNMATCHED

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
