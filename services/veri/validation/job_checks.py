"""The job checks beyond types: files exist, knobs fit the backend, the GPU layout; and, through the
trainer's hook (`TrainerChecks`), the reward code and the `grpo:` section against the installed TRL.

Each check names the config fields it reads; it runs only when those fields validated, so one broken
field is reported once and every other check still runs (`veri validate` prints everything at once).
veri.validation.run runs them (`check_config`). Core imports no service, nor TRL or peft: what only the
trainer can check, it contributes through `TrainerChecks` (veri.services.trainer.validation_hook.TRAINER_CHECKS).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veri.core import envs
from veri.core.config import VERIFIER_REWARD, Backend, JobConfig, RewardConfig, UnknownKeyFix
from veri.core.dataset import read_dataset
from veri.core.grpo import StepBatch
from veri.core.harbor_task import check_tasks
from veri.core.harness import MANIFEST_FILE, ManifestError, load_manifest
from veri.core.problems import Problem, ProblemsError
from veri.gpu import pins, planner
from veri.gpu.job import plan_job, unsaid_backend
from veri.validation import harbor_checks

_VLLM_ONLY = (
    "vllm_tensor_parallel_size", "vllm_data_parallel_size", "vllm_gpu_memory_utilization", "max_model_len",
    "weight_sync", "device", "vllm_sleep_mode",
)
_BUILDABLE_MODELS = {name: f"veri model {name} --out {{path}}" for name in ("tiny", "tiny-vllm", "smollm2")}


@dataclass(frozen=True)
class TrainerChecks:
    """The checks only the trainer can run: it loads the reward code and knows the installed TRL (core
    imports neither). `veri validate` and `veri train` pass
    veri.services.trainer.validation_hook.TRAINER_CHECKS; without it, a job is checked against the schema only."""

    # (the validated rewards, the dataset's column names or None when unknown) -> problems
    rewards: Callable[[list[RewardConfig], list[str] | None], list[Problem]]
    # (the job, the config fields that validated) -> problems of its `grpo:` section ("grpo.<key>" or "grpo")
    grpo: Callable[[JobConfig, set[str]], list[Problem]]
    # an unknown top-level key -> its fix (a TRL setting: "move it under `grpo:`"), or None: core's hint
    unknown_key: UnknownKeyFix


@dataclass
class CheckContext:
    gpus: planner.GpuInventory | None = None  # None: probe this machine
    trainer: TrainerChecks | None = None
    notes: list[str] = field(default_factory=list)
    columns: list[str] | None = None  # the dataset's columns, once read
    tasks: int | None = None  # the dataset's rows, once read
    valid: set[str] = field(default_factory=set)  # the config fields that validated


Check = Callable[[JobConfig, CheckContext], list[Problem]]


def run_checks(config: JobConfig, valid: set[str], context: CheckContext) -> list[Problem]:
    """Run every check in `CHECKS` (in order) whose fields are all in `valid`."""
    problems: list[Problem] = []
    context.valid = valid
    for needs, function in CHECKS:
        if set(needs) <= valid:
            problems += function(config, context)
    return problems


def _model(config: JobConfig, context: CheckContext) -> list[Problem]:
    path = config.model
    if not path.is_dir():
        build = _BUILDABLE_MODELS.get(path.name)
        fix = (
            f"build it: `{build.format(path=path)}`"
            if build
            else "copy the model (config.json, tokenizer files, *.safetensors) onto this machine and set `model:`"
            " to its folder; veri never downloads models"
        )
        return [Problem("model", f"model folder {path} does not exist", fix)]
    if not (path / "config.json").is_file():
        return [Problem("model", f"{path} has no config.json", "point `model:` at a transformers model folder")]
    if not any((path / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        return [Problem("model", f"{path} has no tokenizer files", "copy the tokenizer files into the model folder")]
    return []


def _dataset(config: JobConfig, context: CheckContext) -> list[Problem]:
    if config.dataset.harbor is not None:  # what the tasks' files hold that veri ignores or cannot serve offline
        context.notes += [f"dataset.harbor: {note}" for note in check_tasks(config.dataset.harbor).notes]
    try:
        rows = read_dataset(config.dataset)
    except ProblemsError as error:
        return error.problems
    context.columns = sorted({key for row in rows for key in row})
    context.tasks = len(rows)
    context.notes.append(f"dataset: {len(rows)} tasks, columns {context.columns}")
    return []


def _bundle(config: JobConfig, context: CheckContext) -> list[Problem]:
    if not config.harness_bundle.is_dir():
        fix = "build or copy the bundle (manifest + entrypoint) there, or point `harness_bundle:` at one"
        return [Problem("harness_bundle", f"{config.harness_bundle} is not a folder", fix)]
    try:
        manifest = load_manifest(config.harness_bundle)
    except ManifestError as error:
        return [Problem("harness_bundle", str(error), f"fix the bundle's {MANIFEST_FILE}")]
    if manifest.protocol != config.harness_protocol:
        return [
            Problem(
                "harness_protocol",
                f"is {config.harness_protocol} but the bundle's {MANIFEST_FILE} says {manifest.protocol}",
                "make them agree: the harness must speak the protocol whose routes it is given",
            )
        ]
    return []


def _rewards(config: JobConfig, context: CheckContext) -> list[Problem]:
    problems = [
        Problem(f"rewards[{i}].file", f"{reward.file} does not exist", "fix the path (relative to where you run veri)")
        for i, reward in enumerate(config.rewards)
        if reward.file is not None and not reward.file.is_file()
    ]
    if not problems and context.trainer is not None:
        problems = context.trainer.rewards(config.rewards, context.columns)
    dataset = getattr(config, "dataset", None)  # the check runs when `rewards` validated, `dataset` may not have
    if config.rewards == [RewardConfig(builtin=VERIFIER_REWARD)] and getattr(dataset, "harbor", None) is not None:
        context.notes.append("rewards: the task's verifier (`builtin: verifier`: reward.json's `reward`, else"
                             " reward.txt), the default for a `harbor:` dataset that declares no rewards")
    return problems


def _backend_knobs(config: JobConfig, context: CheckContext) -> list[Problem]:
    if config.backend == Backend.VLLM:
        return []
    return [
        Problem(name, "only applies to `backend: vllm`", "remove it, or set `backend: vllm`")
        for name in _VLLM_ONLY
        if getattr(config, name) != JobConfig.model_fields[name].default  # set in the file
    ]


def _staleness(config: JobConfig, context: CheckContext) -> list[Problem]:
    """Asynchronous training trains on logprobs another policy version sampled, corrected token by token by
    the ratio of the trainer's probability to the sampler's: both must be over the same distribution."""
    if config.max_staleness == 0:
        return []
    problems = []  # (a top_p < 1 would skew it too: the schema refuses that for every job, core/sampling.py)
    if config.vllm_sleep_mode:
        problems.append(Problem(
            "vllm_sleep_mode", "puts the policy to sleep while the trainer steps, so no rollout can run meanwhile",
            "set `vllm_sleep_mode: false` (it needs a GPU of its own for the policy), or `max_staleness: 0`"))
    if config.grpo.get("num_iterations", 1) != 1:
        problems.append(Problem(
            "grpo.num_iterations", "must be 1 with max_staleness >= 1 (each group is trained once, at the step"
            " that takes it)", "remove `grpo.num_iterations`, or set `max_staleness: 0`"))
    return problems


def _batch(config: JobConfig, context: CheckContext) -> list[Problem]:
    """What one step takes (tasks, rollouts) and what the job covers, as a note; a batch TRL refuses (not
    whole groups) is the `grpo:` check's problem."""
    batch = StepBatch.of(config.rollouts_per_prompt, config.grpo)
    if batch is not None and (line := batch.describe(config.max_steps, context.tasks)):
        context.notes.append(line)
    return []


def _evals(config: JobConfig, context: CheckContext) -> list[Problem]:
    """eval_every and eval_dataset act only together; the eval tasks must be readable before step 0."""
    if config.eval_every and config.eval_dataset is None:
        return [Problem("eval_every", f"is {config.eval_every} but no eval_dataset says which tasks to evaluate",
                        "add `eval_dataset: {path: held_out.jsonl}` (tasks the job does not train on), or"
                        " `eval_every: 0`")]
    if config.eval_dataset is None:
        return []
    if not config.eval_every:
        return [Problem("eval_dataset", "is set but eval_every is 0, so it is never used",
                        "set `eval_every: K` (an eval every K steps), or remove `eval_dataset`")]
    try:
        rows = read_dataset(config.eval_dataset)
    except ProblemsError as error:
        return [Problem(f"eval_dataset{'.' + p.where if p.where else ''}", p.message, p.fix)
                for p in error.problems]
    context.notes.append(f"eval_dataset: {len(rows)} tasks x {config.eval_samples} every {config.eval_every} steps")
    return []


# TRL 1.16's loss types that do not weigh every trained token of the generation batch the same, and what
# that does when a rollout is trained as several rows (sub-agents, side calls, compaction: docs/branches.md).
# dapo (veri's default), cispo and vespo divide by the batch's trained tokens: each token weighs the same.
PER_TOKEN_LOSSES = ("dapo", "cispo", "vespo")
_AVERAGED_PER_ROW = ("averages each row's tokens first, so a rollout trained as several rows weighs by its rows,"
                     " not by its sampled tokens")
_DIVIDED_BY_ROWS = ("so every row, branch rows and empty filler rows included, lowers every token's weight: the"
                    " more the harnesses branch, the smaller the step")
UNEVEN_LOSSES = {
    "grpo": _AVERAGED_PER_ROW,
    "sapo": _AVERAGED_PER_ROW,
    "luspo": f"sums each row's tokens and averages over the micro-batch's rows, {_DIVIDED_BY_ROWS}",
    "dr_grpo": f"divides each micro-batch by its rows times max_completion_length, {_DIVIDED_BY_ROWS}",
    "bnpo": "divides by the trained tokens of each micro-batch, not of the generation batch: a rollout's"
            " tokens weigh by whichever micro-batch they were shuffled into, and its branch rows change those counts",
}


def _loss_type(config: JobConfig, context: CheckContext) -> list[Problem]:
    loss = config.grpo.get("loss_type")
    if loss in UNEVEN_LOSSES:
        context.notes.append(
            f"grpo.loss_type {loss} {UNEVEN_LOSSES[loss]} (harnesses that branch: sub-agents, side calls,"
            " compaction); dapo (TRL 1.16's default, which veri keeps) weighs every sampled token of the batch"
            " the same")
    return []


def _gpu_pins(config: JobConfig, context: CheckContext) -> list[Problem]:
    """The vLLM stack's pins agree with each other (TRL's vLLM window, vLLM's torch/transformers): the
    host venv has no vLLM, so this reads the requirements recorded next to the pins (gpu/pins.py)."""
    if config.backend != Backend.VLLM:
        return []
    return [Problem("backend", message, fix) for message, fix in pins.pin_conflicts()]


def _lora(config: JobConfig, context: CheckContext) -> list[Problem]:
    if config.lora_rank is not None:
        return []
    return [
        Problem(name, "does nothing without `lora_rank`", "set `lora_rank` to train a LoRA adapter, or remove it")
        for name in ("lora_alpha", "lora_dropout")
        if getattr(config, name) is not None
    ]


def _per_call_tokens(config: JobConfig, context: CheckContext) -> list[Problem]:
    if config.sampling.max_tokens is None or config.sampling.max_tokens <= config.max_response_length:
        return []
    return [
        Problem(
            "sampling.max_tokens",
            f"{config.sampling.max_tokens} is more than max_response_length ({config.max_response_length})",
            "lower it: one call cannot be longer than the whole row's completion",
        )
    ]


def _context_length(config: JobConfig, context: CheckContext) -> list[Problem]:
    if config.max_model_len is None:
        return []
    problems = []
    if config.max_response_length >= config.max_model_len:
        problems.append(
            Problem(
                "max_response_length",
                f"{config.max_response_length} does not fit in max_model_len ({config.max_model_len}) with a prompt",
                "raise max_model_len or lower max_response_length",
            )
        )
    limit = _model_config(config.model).get("max_position_embeddings")
    if isinstance(limit, int) and config.max_model_len > limit:
        problems.append(
            Problem("max_model_len", f"{config.max_model_len} is more than the model's {limit} positions",
                    f"use {limit} or less")
        )
    return problems


def _grpo(config: JobConfig, context: CheckContext) -> list[Problem]:
    """The `grpo:` section against the installed TRL: the trainer's check (core does not import TRL)."""
    return context.trainer.grpo(config, context.valid) if context.trainer is not None else []


def _layout(config: JobConfig, context: CheckContext) -> list[Problem]:
    """The planner's verdict for the given GPUs (or this machine), its plan and reasons as a note."""
    if config.backend != Backend.VLLM:
        return []
    try:
        facts = planner.model_facts(config.model)
    except planner.LayoutError:
        return []  # the model check reports the folder
    gpus = context.gpus
    if gpus is None and os.environ.get(envs.VERI_GPU_PLAN):
        # Inside the stack's trainer: planned (and its memory checked) before the stack started, for the
        # whole box; this container sees only its own GPU, so a plan made here would differ.
        try:
            context.notes.append("GPU layout (the stack's, VERI_GPU_PLAN): " + planner.plan_from_env().describe())
        except planner.LayoutError as bad_plan:
            return [_layout_problem(config, bad_plan)]
        return []
    if gpus is None and config.device != planner.PolicyDevice.CPU:
        gpus = planner.probe_gpus()
        if gpus.vendor == planner.GpuVendor.NONE:  # validating away from the GPU box
            if (unsaid := unsaid_backend(config, gpus)) is not None:
                return [_layout_problem(config, unsaid)]
            context.notes.append(
                "no NVIDIA GPU on this machine: the GPU layout is planned when the job starts"
                " (`veri validate --gpus N` plans it for an N-GPU box)"
            )
            error = planner.parallel_size_problem(facts, config.vllm_tensor_parallel_size,
                                                 config.vllm_data_parallel_size)
            return [_layout_problem(config, error)] if error else []
    try:
        plan = plan_job(config, gpus)
    except planner.LayoutError as error:
        return [_layout_problem(config, each) for each in error.each()]
    context.notes.append("GPU layout: " + plan.describe())
    return []


def _layout_problem(config: JobConfig, error: planner.LayoutError) -> Problem:
    where = error.knob or ("device" if config.device != planner.PolicyDevice.AUTO else "backend")
    return Problem(where, error.message, error.fix)


def _model_config(model: Path) -> dict[str, Any]:
    try:
        config = json.loads((model / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return config.get("text_config") or config


# (fields read, check), run in this order: the dataset check records the columns the reward check uses.
def _harbor(config: JobConfig, context: CheckContext) -> list[Problem]:
    folders = harbor_checks.harbor_folders(config)
    if not folders or context.tasks is None:  # a dataset that could not be read is named once, by _dataset
        return []
    context.notes.extend(harbor_checks.backend_notes(folders))
    has_image = harbor_checks.docker_has_image()
    if has_image is None:
        context.notes.append("dataset.harbor: the tasks' FROM images were not checked (no Docker daemon answers "
                             "here); `veri tasks build` checks them")
        return []
    return harbor_checks.missing_bases(folders, config.image_map, has_image)


CHECKS: list[tuple[tuple[str, ...], Check]] = [
    (("model",), _model),
    (("dataset",), _dataset),
    (("dataset", "image_map"), _harbor),
    (("harness_bundle",), _bundle),
    (("rewards",), _rewards),
    (("backend", *_VLLM_ONLY), _backend_knobs),
    (("backend",), _gpu_pins),
    (("max_staleness", "vllm_sleep_mode", "grpo"), _staleness),
    (("lora_rank", "lora_alpha", "lora_dropout"), _lora),
    (("sampling", "max_response_length"), _per_call_tokens),
    (("model", "max_model_len", "max_response_length"), _context_length),
    (("grpo",), _grpo),
    (("grpo",), _loss_type),
    (("rollouts_per_prompt", "grpo", "max_steps"), _batch),
    (("eval_every", "eval_dataset", "eval_samples"), _evals),
    (("backend", "model", "vllm_tensor_parallel_size", "vllm_data_parallel_size", "vllm_gpu_memory_utilization",
      "weight_sync", "device", "vllm_sleep_mode", "max_model_len", "max_response_length", "lora_rank", "kl_coef",
      "grpo"), _layout),
]
