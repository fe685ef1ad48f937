"""Checking a job file fully: `check_config` finds every problem at once, `load_config` raises them all.

Structure and types come from the schema (veri.core.config: unknown keys with the nearest real one);
then every check in veri.validation.job_checks whose fields validated (files exist, knobs fit the backend, the
harness bundle's manifest, the GPU layout) and, given `trainer_checks`, the trainer's (the reward code,
GRPO settings against the installed TRL). `veri validate` prints the report; `veri train` loads through
`load_config`; both pass veri.services.trainer.validation_hook.TRAINER_CHECKS.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from veri.core.config import JobConfig, problem_field, read_config_file, validate_fields
from veri.core.problems import Problem, ProblemsError
from veri.gpu.planner import GpuInventory
from veri.validation.job_checks import CheckContext, TrainerChecks, run_checks


@dataclass
class ConfigReport:
    config: JobConfig | None  # None when any problem exists
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what was planned or could not be checked here


def check_config(
    path: Path,
    *,
    base_dir: Path | None = None,
    gpus: GpuInventory | None = None,
    trainer_checks: TrainerChecks | None = None,
) -> ConfigReport:
    """Every problem in a job file at once.

    `gpus` (a `layout.GpuInventory`) is the machine to plan for; None probes this one. `trainer_checks`:
    the trainer's part (None: the schema's checks only). Checks whose inputs are themselves broken are
    skipped (their inputs are already reported).
    """
    try:
        raw = read_config_file(path)
    except ProblemsError as error:
        return ConfigReport(None, error.problems)
    unknown_key = trainer_checks.unknown_key if trainer_checks is not None else None
    values, problems = validate_fields(raw, (base_dir or Path.cwd()).resolve(), unknown_key)
    partial = JobConfig.model_construct(**values)
    valid = set(values) | {name for name, info in JobConfig.model_fields.items() if not info.is_required()}
    valid -= {problem_field(problem) for problem in problems}
    context = CheckContext(gpus=gpus, trainer=trainer_checks)
    problems += run_checks(partial, valid, context)
    config = JobConfig.model_validate(values) if not problems else None
    return ConfigReport(config, problems, context.notes)


def load_config(
    path: Path,
    *,
    base_dir: Path | None = None,
    gpus: GpuInventory | None = None,
    trainer_checks: TrainerChecks | None = None,
) -> JobConfig:
    """Read and fully check a job file; raises `ProblemsError` listing every problem."""
    report = check_config(path, base_dir=base_dir, gpus=gpus, trainer_checks=trainer_checks)
    if report.problems:
        raise ProblemsError(str(path), report.problems)
    assert report.config is not None
    return report.config
