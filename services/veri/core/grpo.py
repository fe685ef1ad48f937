"""The job config's `grpo:` section, checked against the installed TRL's `GRPOConfig`.

Two tables decide what may go there:
  `VERI_KNOBS`  GRPOConfig fields a veri knob sets (the job's own name wins; one source of truth).
  `VERI_OWNED`  GRPOConfig fields veri sets itself, or that do nothing when rollouts come from harnesses.
Any other GRPOConfig field passes through unchanged; anything else is an error with a suggestion.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import tempfile
import typing
import warnings
from typing import Any

from pydantic import TypeAdapter, ValidationError

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
}

_SERVER = "veri starts the policy server and connects the trainer to it"
_PROXY = "rollouts are sampled through the capture proxy, which sends only sampling.temperature/top_p/max_tokens"
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
    "vllm_enable_sleep_mode": _COLOCATE,
    "vllm_model_impl": _COLOCATE,
    "vllm_structured_outputs_regex": _PROXY,
    "top_k": _PROXY,
    "min_p": _PROXY,
    "repetition_penalty": _PROXY,
    "generation_kwargs": _PROXY,
    "use_transformers_continuous_batching": "generation runs in the policy server, not inside TRL",
    "transformers_continuous_batching_config": "generation runs in the policy server, not inside TRL",
    "max_tool_calling_iterations": "use `max_turns` (the harness runs its own tool loop)",
    "reward_weights": "set each reward's `weight:` under `rewards:`",
}


@dataclasses.dataclass(frozen=True)
class GrpoProblem:
    key: str
    message: str
    fix: str


@functools.cache
def grpo_field_types() -> dict[str, Any]:
    """Every field of the installed TRL's GRPOConfig -> its type (imports TRL: slow, cached)."""
    from trl import GRPOConfig

    hints = typing.get_type_hints(GRPOConfig)
    return {field.name: hints[field.name] for field in dataclasses.fields(GRPOConfig) if field.init}


def check_grpo_section(section: dict[str, Any], *, knobs: dict[str, Any] | None) -> list[GrpoProblem]:
    """Every problem in `grpo:` at once: unknown keys (nearest real field), veri-owned keys, bad types,
    then (when those are clean and `knobs` is given) TRL's own checks, by building the GRPOConfig the
    job would get from `knobs` (the kwargs veri's own knobs produce) plus the section.
    """
    types = grpo_field_types()
    problems = []
    coerced = {}
    for key, value in section.items():
        if key in VERI_KNOBS:
            problems.append(GrpoProblem(key, "is set by a veri knob", f"set `{VERI_KNOBS[key]}` instead"))
        elif key in VERI_OWNED:
            problems.append(GrpoProblem(key, "is not accepted here", f"remove it: {VERI_OWNED[key]}"))
        elif key not in types:
            problems.append(GrpoProblem(key, "is not a field of TRL's GRPOConfig", suggest(key, types)))
        else:
            try:
                coerced[key] = TypeAdapter(types[key]).validate_python(value)
            except ValidationError as error:
                reason = error.errors()[0]["msg"]
                fix = f"give it a {_type_name(types[key])}"
                problems.append(GrpoProblem(key, f"has the wrong type ({value!r}: {reason})", fix))
    if problems or knobs is None:
        return problems
    return _trl_problems({**knobs, **coerced})


def suggest(key: str, names: typing.Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(names), n=1, cutoff=0.6)
    return f"did you mean `{close[0]}`?" if close else "remove it (no similar name exists)"


def _trl_problems(kwargs: dict[str, Any]) -> list[GrpoProblem]:
    import torch
    from trl import GRPOConfig

    if not torch.cuda.is_available():
        # Checking a GPU job on a machine without one: TRL would refuse bf16 here, not on the GPU box.
        kwargs = {**kwargs, "use_cpu": True}
    with tempfile.TemporaryDirectory() as out, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            GRPOConfig(output_dir=out, **kwargs)
        except (ValueError, TypeError) as error:
            fix = "change the grpo: values (or the veri knobs) it names"
            return [GrpoProblem("", f"TRL rejects these settings: {error}", fix)]
    return []


def _type_name(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")
