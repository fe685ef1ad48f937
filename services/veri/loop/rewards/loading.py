"""Loading the job's reward functions (files or inline source) and checking their signatures."""

from __future__ import annotations

import importlib.util
import inspect
import linecache
import re
import sys
import types
from typing import Any

from veri.core.config import RewardConfig
from veri.core.dataset import PROMPT
from veri.core.problems import Problem, ProblemsError
from veri.loop.rewards.functions import DECLARED_ONLY, STANDARD_INPUTS, RewardFunction, one_line
from veri.loop.rewards.verifier import verifier_functions, verifier_problems


def load_reward_functions(rewards: list[RewardConfig], columns: list[str] | None = None) -> list[RewardFunction]:
    """The job's reward functions; raises `ProblemsError` with every problem (`columns`: the dataset's)."""
    functions, problems = _load(rewards, columns)
    if problems:
        raise ProblemsError("rewards", problems)
    return functions


def check_reward_functions(rewards: list[RewardConfig], columns: list[str] | None) -> list[Problem]:
    """The `TrainerChecks.rewards` hook of `check_config`: load every function and check its signature."""
    return _load(rewards, columns)[1]


def _load(rewards: list[RewardConfig], columns: list[str] | None) -> tuple[list[RewardFunction], list[Problem]]:
    functions: list[RewardFunction] = []
    problems: list[Problem] = []
    for index, spec in enumerate(rewards):
        where = f"rewards[{index}]"
        if spec.builtin is not None:  # only `verifier` (the schema refuses other names)
            problems += verifier_problems(where, columns)
            functions += verifier_functions(spec)
            continue
        try:
            module = _import(spec, index)
        except Exception as error:  # noqa: BLE001 - user code: anything can happen at import
            origin = spec.file or "source"
            message = f"cannot load {origin}: {one_line(error)}"
            problems.append(Problem(where, message, "fix the error in the reward code"))
            continue
        func, problem = _pick(module, spec, where)
        if problem:
            problems.append(problem)
            continue
        function = RewardFunction.wrap(spec.name or func.__name__, func, spec.weight)
        problems += _signature_problems(function, where, columns)
        functions.append(function)
    clashes = sorted(set(columns or ()) & {*STANDARD_INPUTS, *DECLARED_ONLY})
    problems += [
        Problem("dataset.column_mapping", f"the dataset column {column!r} has the name of a reward input",
                f"rename it: dataset.column_mapping: {{{column}: <new name>}}")
        for column in clashes
    ]
    names = [function.name for function in functions]
    problems += [
        Problem("rewards", f"two reward functions are named {name!r}", "give one of them a `name:`")
        for name in sorted({n for n in names if names.count(n) > 1})
    ]
    return functions, problems


def _import(spec: RewardConfig, index: int) -> types.ModuleType:
    stem = re.sub(r"\W", "_", spec.file.stem if spec.file else "inline")
    name = f"veri_reward_{index}_{stem}"
    if spec.file is not None:
        module_spec = importlib.util.spec_from_file_location(name, spec.file)
        assert module_spec is not None and module_spec.loader is not None
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module  # dataclasses and pickling look the module up by name
        module_spec.loader.exec_module(module)
        return module
    assert spec.source is not None
    filename = f"<rewards[{index}].source>"
    linecache.cache[filename] = (len(spec.source), None, spec.source.splitlines(True), filename)  # tracebacks
    module = types.ModuleType(name)
    module.__file__ = filename
    sys.modules[name] = module
    exec(compile(spec.source, filename, "exec"), module.__dict__)  # noqa: S102 - the job's own reward source
    return module


def _pick(module: types.ModuleType, spec: RewardConfig, where: str) -> tuple[Any, Problem | None]:
    defined = {
        name: value
        for name, value in vars(module).items()
        if inspect.isfunction(value) and value.__module__ == module.__name__ and not name.startswith("_")
    }
    if spec.function is not None:
        func = getattr(module, spec.function, None)
        if callable(func):
            return func, None
        return None, Problem(f"{where}.function", f"no function {spec.function!r} in the reward code",
                             f"use one of {sorted(defined)}")
    if "reward" in defined:
        return defined["reward"], None
    if len(defined) == 1:
        return next(iter(defined.values())), None
    found = f"functions {sorted(defined)}" if defined else "no public function"
    return None, Problem(where, f"defines {found} and none is named `reward`",
                         "name the one to use: `function: <name>` (or call it `reward`)")


def _signature_problems(function: RewardFunction, where: str, columns: list[str] | None) -> list[Problem]:
    parameters = inspect.signature(function.func).parameters.values()
    problems = [
        Problem(where, f"parameter {p.name!r} of {function.name} is positional-only", "make it a normal parameter")
        for p in parameters
        if p.kind == p.POSITIONAL_ONLY
    ]
    if columns is None:
        return problems
    known = {*STANDARD_INPUTS, *DECLARED_ONLY, *(c for c in columns if c != PROMPT)}
    for p in parameters:
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.default is p.empty and p.name not in known:
            problems.append(Problem(
                where, f"{function.name} requires {p.name!r}, which is neither a standard input nor a dataset column",
                f"use one of {sorted(known)}, give it a default, or add the column to the dataset",
            ))
    return problems


# --- scoring ---------------------------------------------------------------------------------------
