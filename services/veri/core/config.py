"""The job config: one schema, written as YAML or TOML with the same keys.

    model, backend, dataset, harness_bundle, harness_protocol, rewards, sampling   what to train, on what
    rollouts_per_prompt ... lora_dropout                                          the loop's knobs (flat)
    grpo                                                                          TRL GRPOConfig pass-through

Relative paths resolve against `base_dir` (default: the directory veri runs in, i.e. the repo root for
`make train`). Every accepted knob has a consumer, named in its description; knobs that cannot act in
a given setup (a `vllm_*`, `weight_sync` or `device` knob with `backend: hf`) are problems, not silently ignored.

Here: the schema, and reading it (`read_config_file`, `parse_config`: structure and types, each problem
with its fix). Checking a job fully (files, the GPU layout, and through the trainer's hook the reward
code and the GRPO settings against the installed TRL) is veri.validation.run's `check_config` /
`load_config`, over the checks in veri.validation.job_checks. What the job means to TRL (GRPOConfig and LoraConfig
kwargs) is the trainer's: veri.services.trainer.grpo.config.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from veri.core import grpo as grpo_rules
from veri.core.dataset import DatasetConfig
from veri.core.placement import AUTO, DataParallelSize, PolicyDevice, WeightSync
from veri.core.problems import Problem, ProblemsError
from veri.core.records import HostedTools
from veri.core.sampling import TEMPERATURE_FLOOR, UNMATCHED, UNMATCHED_FIX, temperature_problem, top_p_problem
from veri.core.signals import SignalsConfig


class Backend(StrEnum):
    VLLM = "vllm"  # GPU: vLLM policy server, TRL pushes weights over NCCL
    HF = "hf"  # CPU: veri's transformers policy server, weights pushed after every step


def _replica_count(value: Any) -> DataParallelSize:
    if value is None or value == AUTO:
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise ValueError(f"{value!r} is not a replica count; set a whole number >= 1, or `auto` to fill the free GPUs")


# an int >= 1 or "auto" (one validator, so a bad value is one problem, not one per union member)
ReplicaCount = Annotated[DataParallelSize, PlainValidator(_replica_count, json_schema_input_type=DataParallelSize)]


class HarnessProtocol(StrEnum):
    OPENAI = "openai"
    ANTHROPIC = "anthropic"


class SamplingConfig(BaseModel):
    """The whole sampling of every model call (core/sampling.py: what the trainer can match, and why)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # a NaN weight or rate poisons training

    temperature: float = Field(
        default=1.0, ge=TEMPERATURE_FLOOR, description="proxy sampling and TRL's logprob temperature"
    )
    top_p: float = Field(default=1.0, gt=0, le=1, description="1 only: a nucleus the trainer cannot score")
    max_tokens: int | None = Field(
        default=None, ge=1, description="proxy: cap on tokens per model call (default: max_response_length)"
    )

    @field_validator("temperature", mode="before")  # before the bound: its own message says why and what to set
    @classmethod
    def _above_the_floor(cls, value: Any) -> Any:
        if isinstance(value, int | float) and not isinstance(value, bool):
            if (problem := temperature_problem(value)) is not None:
                raise ValueError(problem)
        return value

    @field_validator("top_p")
    @classmethod
    def _whole_distribution(cls, value: float) -> float:
        if (problem := top_p_problem(value)) is not None:
            raise ValueError(problem)
        return value


class RewardConfig(BaseModel):
    """One reward function: a Python file or inline source, and its weight in the sum."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # a NaN weight or rate poisons training

    file: Path | None = Field(default=None, description="a Python file defining the function")
    source: str | None = Field(default=None, description="inline Python source defining the function")
    function: str | None = Field(
        default=None, description="which function (default: `reward`, or the only function defined)"
    )
    name: str | None = Field(default=None, description="label in metrics and records (default: the function's)")
    weight: float = Field(default=1.0, description="its factor in the rollout's reward (a weighted sum)")

    @model_validator(mode="after")
    def _one_origin(self) -> RewardConfig:
        if (self.file is None) == (self.source is None):
            raise ValueError("needs exactly one of `file` and `source`; give a Python `file:` or inline `source:`")
        return self


class JobConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # a NaN weight or rate poisons training

    model: Path = Field(description="local transformers model folder (config.json, tokenizer, weights)")
    backend: Backend = Field(
        default=Backend.VLLM,
        description="policy server: vllm (GPU) or hf (CPU); unset is vllm, and refused on a machine with no"
        " NVIDIA GPU (say which you mean)",
    )
    dataset: DatasetConfig = Field(
        description="trainer: the tasks (JSONL, or Harbor task folders); each row is one GRPO group's task"
    )
    harness_bundle: Path = Field(description="launcher: the harness bundle folder (manifest + code)")
    harness_protocol: HarnessProtocol = Field(default=HarnessProtocol.OPENAI, description="launcher: SDK routes")
    rewards: list[RewardConfig] = Field(min_length=1, description="trainer: reward functions, summed with weights")
    reward_timeout_s: float = Field(default=60.0, gt=0, description="trainer: per reward-function call")
    sampling: SamplingConfig = Field(default_factory=SamplingConfig, description="how the policy samples")

    rollouts_per_prompt: int = Field(default=8, ge=2, description="GRPO group size (TRL num_generations)")
    max_response_length: int = Field(
        default=4096, ge=1, description="tokens in a row's completion, all turns (TRL max_completion_length)"
    )
    learning_rate: float = Field(default=1e-6, gt=0, description="TRL learning_rate")
    max_steps: int = Field(default=200, ge=1, description="TRL max_steps: optimizer steps")
    kl_coef: float = Field(default=0.0, ge=0, description="TRL beta: KL penalty against the reference model")
    max_turns: int = Field(default=10, ge=1, description="launcher: VERI_MAX_TURNS hint to the harness")
    harness_timeout_s: float = Field(default=600.0, gt=0, description="launcher: kill a rollout after this")
    max_parallel_rollouts: int = Field(default=16, ge=1, description="launcher: sandboxes running at once")
    max_staleness: int = Field(
        default=0, ge=0,
        description="trainer: a group sampled under policy version v may be trained up to step v + max_staleness"
        " (0: synchronous, every step samples afresh; >= 1: rollouts keep running while the trainer steps)",
    )
    importance_sampling_cap: float = Field(
        default=3.0, gt=1,
        description="trainer: per-token importance ratio (trainer / sampler probability) truncated at this"
        " (TRL vllm_importance_sampling_clip_max; both backends)",
    )
    eval_every: int = Field(
        default=0, ge=0,
        description="trainer: every K steps, after the weight sync, the eval_dataset's tasks through the harness"
        " with no training: eval/... in the step's metrics and an eval archive beside the job (0: never)",
    )
    eval_dataset: DatasetConfig | None = Field(
        default=None, description="trainer: the held-out tasks eval_every runs (JSONL, like dataset)"
    )
    eval_samples: int = Field(default=1, ge=1, description="trainer: samples per eval_dataset task (eval_every)")
    signals: SignalsConfig = Field(
        default_factory=SignalsConfig, description="console: thresholds of the reward-hacking signals (docs/signals.md)"
    )
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="proxy rendering and TRL, e.g. {enable_thinking: false}"
    )
    hosted_tools: HostedTools = Field(
        default=HostedTools.DROP,
        description="proxy: a request's hosted tools (Responses web_search, file_search, ...; Anthropic server"
        " tools), which the policy cannot run: drop = left out of the prompt, named on the span"
        " (hosted_tools_dropped); refuse = the request gets 400",
    )
    vllm_tensor_parallel_size: int | None = Field(default=None, ge=1, description="vllm: TP (default: planned)")
    vllm_data_parallel_size: ReplicaCount = Field(
        default=None,
        description="vllm: policy replicas (default 1); `auto`: as many as fit in the free GPUs (layout planner)",
    )
    vllm_gpu_memory_utilization: float | None = Field(
        default=None, gt=0, le=1,
        description="vllm: --gpu-memory-utilization (default: vLLM's 0.9; 0.3 when sharing 1 GPU with the trainer)",
    )
    weight_sync: WeightSync = Field(
        default=WeightSync.AUTO,
        description="vllm: how the trainer's weights reach the policy: nccl (2+ GPUs), filesystem (1 GPU, CPU,"
        " or where NCCL cannot go); auto picks (layout planner -> trainer and policy)",
    )
    vllm_sleep_mode: bool = Field(
        default=False,
        description="vllm: the policy sleeps (weights to host memory, KV cache freed) from the end of each step's"
        " rollouts to the next weight sync, giving the trainer the GPU (1 GPU shared; --enable-sleep-mode)",
    )
    device: PolicyDevice = Field(
        default=PolicyDevice.AUTO,
        description="vllm: auto/cuda = NVIDIA GPUs (planned); cpu = vLLM's CPU build, one server per replica",
    )
    max_model_len: int | None = Field(default=None, ge=1, description="vllm: --max-model-len (default: model's)")
    lora_rank: int | None = Field(default=None, ge=1, description="trainer: LoRA rank (unset: full fine-tune)")
    lora_alpha: int | None = Field(default=None, ge=1, description="trainer: LoRA alpha (default 2 x lora_rank)")
    lora_dropout: float | None = Field(default=None, ge=0, lt=1, description="trainer: LoRA dropout (default 0)")

    grpo: dict[str, Any] = Field(default_factory=dict, description="any other TRL GRPOConfig field, passed through")

    @property
    def max_tokens_per_call(self) -> int:
        return self.sampling.max_tokens or self.max_response_length

    def knob(self, dotted: str) -> Any:
        """A knob's value by its dotted name ("sampling.temperature")."""
        value: Any = self
        for part in dotted.split("."):
            value = getattr(value, part)
        return value


# --- loading ---------------------------------------------------------------------------------------


def read_config_file(path: Path) -> dict[str, Any]:
    """The raw mapping of a .yaml/.yml/.toml file (same keys either way)."""
    path = Path(path)
    where = str(path)
    if not path.is_file():
        fix = "pass the path of a .yaml or .toml job file"
        raise ProblemsError(where, [Problem("", f"{path} does not exist", fix)])
    try:
        if path.suffix in (".yaml", ".yml"):
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        elif path.suffix == ".toml":
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        else:
            raise ProblemsError(where, [Problem("", f"unknown config format {path.suffix!r}", "use .yaml or .toml")])
    except (yaml.YAMLError, tomllib.TOMLDecodeError) as error:
        problem = Problem("", f"cannot parse: {error}", "fix the syntax at the place named")
        raise ProblemsError(where, [problem]) from error
    except UnicodeDecodeError as error:
        problem = Problem("", f"is not UTF-8 text ({error})", "save the job file as UTF-8 text")
        raise ProblemsError(where, [problem]) from error
    except RecursionError as error:
        problem = Problem("", "nests lists or mappings too deeply to read", "write the job as flat `key: value` lines")
        raise ProblemsError(where, [problem]) from error
    if not isinstance(raw, dict):
        raise ProblemsError(where, [Problem("", "the file is not a mapping of keys", "write `key: value` lines")])
    return raw


def parse_config(raw: dict[str, Any], *, base_dir: Path | None = None) -> JobConfig:
    """Structure and types only (no file or GPU checks); raises `ProblemsError` with every problem."""
    values, problems = validate_fields(raw, (base_dir or Path.cwd()).resolve())
    if problems:
        raise ProblemsError("config", problems)
    return JobConfig.model_validate(values)


# The fix for an unknown top-level key that a service knows (the trainer: a TRL setting), or None.
UnknownKeyFix = Callable[[str], str | None]


def validate_fields(
    raw: dict[str, Any], base_dir: Path, unknown_key: UnknownKeyFix | None = None
) -> tuple[dict[str, Any], list[Problem]]:
    """Each top-level field validated on its own, so one bad field does not hide checks of the others."""
    problems: list[Problem] = []
    try:
        JobConfig.model_validate(raw)
    except ValidationError as error:
        problems = [_structure_problem(item, unknown_key) for item in error.errors()]
    values: dict[str, Any] = {}
    for name, info in JobConfig.model_fields.items():
        if name not in raw:
            continue
        try:
            # A field's type built at run time: beyond what a static checker can follow.
            adapter: TypeAdapter[Any] = TypeAdapter(Annotated[info.annotation, info])  # type: ignore[arg-type]
            values[name] = adapter.validate_python(raw[name])
        except ValidationError:
            continue  # reported above
    return _resolve_paths(values, base_dir), problems


# A path field's new value, given its dotted place ("rewards[1].file") and its value.
PlacePath = Callable[[str, Path], Path]


def map_paths(config: JobConfig, place: PlacePath) -> JobConfig:
    """The job with every path it names (model, harness_bundle, dataset.path/harbor, eval_dataset.*, rewards[].file)
    replaced by `place(where, path)`: the job as another machine or container sees it. Keeps which keys the
    file set (a `model_dump(exclude_unset=True)` writes the same keys back)."""
    values = _map_paths({name: getattr(config, name) for name in config.model_fields_set}, place)
    return JobConfig.model_validate(values)


def _resolve_paths(values: dict[str, Any], base: Path) -> dict[str, Any]:
    return _map_paths(values, lambda _where, path: (base / path.expanduser()).resolve())


def _map_paths(values: dict[str, Any], place: PlacePath) -> dict[str, Any]:
    """The one list of the job's path fields, over validated field values."""
    values = dict(values)
    for name in ("model", "harness_bundle"):
        if name in values:
            values[name] = place(name, values[name])
    for name in ("dataset", "eval_dataset"):
        if values.get(name) is not None:
            values[name] = values[name].model_copy(update={
                key: place(f"{name}.{key}", getattr(values[name], key))
                for key in ("path", "harbor") if getattr(values[name], key) is not None})
    if "rewards" in values:
        values["rewards"] = [
            reward.model_copy(update={"file": place(f"rewards[{i}].file", reward.file)}) if reward.file else reward
            for i, reward in enumerate(values["rewards"])
        ]
    return values


def problem_field(problem: Problem) -> str:
    return problem.where.split(".")[0].split("[")[0]


def _structure_problem(error: Any, unknown_key: UnknownKeyFix | None) -> Problem:
    loc = tuple(error["loc"])
    where = _dotted(loc)
    kind = error["type"]
    if kind == "missing":
        info = _field_info(loc)
        hint = f" ({info.description})" if info is not None and info.description else ""
        return Problem(where, "is required", f"add `{loc[-1]}`{hint}")
    if kind == "extra_forbidden":
        return Problem(where, "is not a known key", _unknown_key_fix(loc, unknown_key))
    message = error["msg"].removeprefix("Value error, ")
    if kind == "value_error":  # our own validators write "what is wrong; what to do"
        problem, _, fix = message.partition("; ")
        return Problem(where, problem, fix or "change it")
    if kind == "path_type":
        return Problem(where, f"{error['input']!r} is not a path", f"set `{where}` to a path (a string)")
    if kind == "too_short":
        return Problem(where, f"{error['input']!r} is too short: {message}",
                       f"give `{where}` at least {error['ctx']['min_length']} entries")
    wanted = message.removeprefix("Input should be ").split(",")[0]
    if wanted.startswith(("greater", "less")):
        wanted = f"a value {wanted}"
    return Problem(where, f"{error['input']!r} is not valid: {message}", f"set `{where}` to {wanted}")


def _unknown_key_fix(loc: tuple[Any, ...], unknown_key: UnknownKeyFix | None) -> str:
    key = str(loc[-1])
    model = _model_at(loc[:-1])
    if model is SamplingConfig and key in UNMATCHED:
        return f"{UNMATCHED_FIX} ({UNMATCHED[key]})"
    if model is JobConfig:
        if key in grpo_rules.VERI_OWNED:
            return f"remove it: {grpo_rules.VERI_OWNED[key]}"
        if key in grpo_rules.VERI_KNOBS:
            return f"use `{grpo_rules.VERI_KNOBS[key]}` (veri's name for TRL's {key})"
        if unknown_key is not None and (fix := unknown_key(key)) is not None:
            return fix
    return grpo_rules.suggest(key, model.model_fields if model else [])


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model that holds the keys at `loc` (list indices skipped)."""
    model: type[BaseModel] = JobConfig
    for part in loc:
        if isinstance(part, int):
            continue
        info = model.model_fields.get(part)
        if info is None:
            return None
        inner = _model_in(info.annotation)
        if inner is None:
            return None
        model = inner
    return model


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in getattr(annotation, "__args__", ()):
        found = _model_in(argument)
        if found is not None:
            return found
    return None


def _field_info(loc: tuple[Any, ...]) -> Any:
    model = _model_at(loc[:-1])
    return model.model_fields.get(str(loc[-1])) if model else None


def _dotted(loc: tuple[Any, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text
