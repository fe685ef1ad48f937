"""The job's `grpo:` section checked against the installed TRL's `GRPOConfig` (the trainer's part of
`veri validate`; core's checks call it through `TrainerChecks.grpo`).

`check_grpo` reports every problem at once: unknown keys (with the nearest real field), keys a veri knob
sets or veri owns (core.grpo's tables), wrong types, then, when those are clean and the knobs it
combines with validated, TRL's own checks on the GRPOConfig the job would get. `unknown_top_level_key`
points a TRL setting written at the top level to `grpo:`.
"""

from __future__ import annotations

import tempfile
import warnings
from typing import Any

from pydantic import TypeAdapter, ValidationError

from veri.core.config import JobConfig
from veri.core.grpo import VERI_KNOBS, VERI_OWNED, suggest
from veri.core.problems import Problem
from veri.services.trainer.grpo.config import grpo_field_types, knob_kwargs

# The config fields `knob_kwargs` reads: TRL's own checks run only when all of them validated.
KNOB_FIELDS = frozenset({"backend", *(knob.split(".")[0] for knob in VERI_KNOBS.values())})


def check_grpo(config: JobConfig, valid: set[str]) -> list[Problem]:
    """The `TrainerChecks.grpo` hook: keys and types always; TRL's own checks only when the veri knobs
    they combine with are in `valid`."""
    knobs = knob_kwargs(config) if KNOB_FIELDS <= valid else None
    return check_grpo_section(config.grpo, knobs=knobs)


def check_grpo_section(section: dict[str, Any], *, knobs: dict[str, Any] | None) -> list[Problem]:
    """Every problem in `grpo:` at once: unknown keys (nearest real field), veri-owned keys, bad types,
    then (when those are clean and `knobs` is given) TRL's own checks, by building the GRPOConfig the
    job would get from `knobs` (the kwargs veri's own knobs produce) plus the section.
    """
    types = grpo_field_types()
    problems = []
    coerced = {}
    for key, value in section.items():
        where = f"grpo.{key}"
        if key in VERI_KNOBS:
            problems.append(Problem(where, "is set by a veri knob", f"set `{VERI_KNOBS[key]}` instead"))
        elif key in VERI_OWNED:
            problems.append(Problem(where, "is not accepted here", f"remove it: {VERI_OWNED[key]}"))
        elif key not in types:
            problems.append(Problem(where, "is not a field of TRL's GRPOConfig", suggest(key, types)))
        else:
            try:
                coerced[key] = TypeAdapter(types[key]).validate_python(value)
            except ValidationError as error:
                reason = error.errors()[0]["msg"]
                fix = f"give it a {_type_name(types[key])}"
                problems.append(Problem(where, f"has the wrong type ({value!r}: {reason})", fix))
    if problems or knobs is None:
        return problems
    return _trl_problems({**knobs, **coerced})


def unknown_top_level_key(key: str) -> str | None:
    """The `TrainerChecks.unknown_key` hook: a GRPOConfig field at the top level belongs under `grpo:`."""
    return f"`{key}` is a TRL GRPOConfig setting: move it under `grpo:`" if key in grpo_field_types() else None


def _trl_problems(kwargs: dict[str, Any]) -> list[Problem]:
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
            return [Problem("grpo", f"TRL rejects these settings: {error}", fix)]
    return []


def _type_name(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")
