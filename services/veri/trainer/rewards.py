"""Reward functions: loaded from the job's files or inline source, called TRL-style per rollout.

The calling convention mirrors TRL 1.16's `GRPOTrainer._calculate_rewards` for a batch of one:

    reward(prompts=[prompt], completions=[completion], completion_ids=[ids], **{column: [value]},
           trainer_state=..., log_extra=..., log_metric=...)  ->  [number or None]

`completion` is the final answer: the last span's reply as a one-message list when the task's prompt is
a message list (TRL's conversational format), or its text when the prompt is text. Dataset columns
other than `prompt` come as lists. Two extra inputs go only to functions that declare them:
`trajectory` (the whole conversation: the final call's messages, tool results included, plus the
reply) and `outputs` (the folder the harness left in VERI_OUTPUT_DIR). A function with `**kwargs`
gets everything else; one without gets exactly the names it declares. A bare number is accepted
as well as a one-element list; None (or NaN) means "no value from this function".

Timeouts: every call runs off the caller's thread and is waited for at most `reward_timeout_s`.
Async functions share one event loop on a daemon thread (as in TRL, so clients they cache keep
working) and are cancelled on timeout. Sync functions each run on a daemon thread that is abandoned
on timeout: Python cannot kill a thread, so a hung function keeps its thread until it returns, but
the job goes on and the daemon thread cannot block exit. (A subprocess could be killed, but would
re-import the function per call, lose any state it caches, and need picklable inputs.) An exception,
a timeout or a non-number is a `reward_error` verdict: that rollout is masked, the job continues.
Calls for different rollouts run concurrently, so a sync function must tolerate that.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import linecache
import math
import re
import sys
import threading
import time
import traceback
import types
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veri.core.config import RewardConfig
from veri.core.dataset import PROMPT
from veri.core.episodes import EpisodeSpan, Rule, Verdict, as_episode_spans
from veri.core.problems import Problem, ProblemsError
from veri.core.rollouts import RewardOutcome, RolloutRecord

# What a reward function can ask for besides dataset columns. (TRL also passes `environments`,
# which veri has no equivalent for.)
STANDARD_INPUTS = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric")
DECLARED_ONLY = ("trajectory", "outputs")  # passed only to functions that name them


@dataclass(frozen=True)
class RewardFunction:
    name: str
    func: Callable[..., Any]
    weight: float
    declared: frozenset[str]  # parameter names it can take by keyword
    takes_kwargs: bool
    is_async: bool

    @classmethod
    def wrap(cls, name: str, func: Callable[..., Any], weight: float = 1.0) -> RewardFunction:
        parameters = inspect.signature(func).parameters.values()
        return cls(
            name=name,
            func=func,
            weight=weight,
            declared=frozenset(p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)),
            takes_kwargs=any(p.kind == p.VAR_KEYWORD for p in parameters),
            is_async=inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(type(func).__call__),
        )

    def kwargs_for(self, available: dict[str, Any]) -> dict[str, Any]:
        if self.takes_kwargs:
            passed = {k: v for k, v in available.items() if k not in DECLARED_ONLY or k in self.declared}
        else:
            passed = {k: v for k, v in available.items() if k in self.declared}
        return passed


@dataclass
class RewardInputs:
    """What the reward functions see for one rollout."""

    task: dict[str, Any]  # the dataset row (after column_mapping): `prompt` + columns
    completion: Any  # the final answer (see the module docstring)
    completion_ids: list[int]
    trajectory: list[dict[str, Any]]
    outputs: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # trainer_state, log_extra, log_metric

    @classmethod
    def from_record(cls, record: RolloutRecord, *, outputs: Path | None = None, **extra: Any) -> RewardInputs:
        row = record.episode.row
        ids = row.completion_ids if row is not None else None
        return cls.from_spans(record.task, record.spans, ids, outputs=outputs, **extra)

    @classmethod
    def from_spans(
        cls, task: dict[str, Any], spans: list[Any], completion_ids: list[int] | None = None,
        *, outputs: Path | None = None, **extra: Any,
    ) -> RewardInputs:
        ordered: list[EpisodeSpan] = as_episode_spans(spans)
        final = ordered[-1] if ordered else None
        reply = dict(final.reply_message) if final else {"role": "assistant", "content": ""}
        conversational = not isinstance(task.get(PROMPT), str)
        return cls(
            task=task,
            completion=[reply] if conversational else (reply.get("content") or ""),
            completion_ids=list(completion_ids or (final.completion_token_ids if final else [])),
            trajectory=[*final.messages, reply] if final else [],
            outputs=outputs,
            extra=extra,
        )

    def available(self) -> dict[str, Any]:
        columns = {key: [value] for key, value in self.task.items() if key != PROMPT}
        return {
            **columns,
            "prompts": [self.task.get(PROMPT)],
            "completions": [self.completion],
            "completion_ids": [self.completion_ids],
            "trajectory": [self.trajectory],
            "outputs": [self.outputs],
            **self.extra,
        }


# --- loading ---------------------------------------------------------------------------------------


def load_reward_functions(rewards: list[RewardConfig], columns: list[str] | None = None) -> list[RewardFunction]:
    """The job's reward functions; raises `ProblemsError` with every problem (`columns`: the dataset's)."""
    functions, problems = _load(rewards, columns)
    if problems:
        raise ProblemsError("rewards", problems)
    return functions


def check_reward_functions(rewards: list[RewardConfig], columns: list[str] | None) -> list[Problem]:
    """The `reward_check` hook of `check_config`: load every function and check its signature."""
    return _load(rewards, columns)[1]


def _load(rewards: list[RewardConfig], columns: list[str] | None) -> tuple[list[RewardFunction], list[Problem]]:
    functions: list[RewardFunction] = []
    problems: list[Problem] = []
    for index, spec in enumerate(rewards):
        where = f"rewards[{index}]"
        try:
            module = _import(spec, index)
        except Exception as error:  # user code: anything can happen at import
            origin = spec.file or "source"
            message = f"cannot load {origin}: {_one_line(error)}"
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
    exec(compile(spec.source, filename, "exec"), module.__dict__)
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


class RewardScorer:
    """Calls the reward functions with a per-call timeout. Use as a context manager (or `close()`)."""

    def __init__(self, functions: list[RewardFunction], timeout_s: float):
        self.functions = functions
        self.timeout_s = timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        if any(function.is_async for function in functions):
            self._loop = asyncio.new_event_loop()
            self._loop_thread = threading.Thread(target=self._loop.run_forever, name="veri-rewards-async", daemon=True)
            self._loop_thread.start()

    def score(self, inputs: RewardInputs) -> RewardOutcome:
        return self.score_many([inputs])[0]

    def score_many(self, batch: list[RewardInputs]) -> list[RewardOutcome]:
        """Every (rollout, function) call starts at once; each is waited for until the shared deadline."""
        started = [[self._start(function, inputs) for function in self.functions] for inputs in batch]
        deadline = time.monotonic() + self.timeout_s
        return [self._outcome(futures, deadline) for futures in started]

    def close(self) -> None:
        if self._loop is not None and self._loop_thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop_thread.join(timeout=5)

    def __enter__(self) -> RewardScorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self, function: RewardFunction, inputs: RewardInputs) -> Future:
        kwargs = function.kwargs_for(inputs.available())
        if function.is_async:
            assert self._loop is not None
            try:
                coroutine = function.func(**kwargs)
            except Exception as error:  # e.g. a signature mismatch, raised before the coroutine exists
                return _failed(error)
            return asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        future: Future = Future()

        def run() -> None:
            # A running future cannot be cancelled, so a call that outlives its timeout still completes it
            # (its result is ignored) instead of raising InvalidStateError in this thread.
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(function.func(**kwargs))
            except BaseException as error:  # user code; reported, never raised into the job
                future.set_exception(error)

        threading.Thread(target=run, name=f"veri-reward-{function.name}", daemon=True).start()
        return future

    def _outcome(self, futures: list[Future], deadline: float) -> RewardOutcome:
        per_function: dict[str, float | None] = {}
        verdicts: list[Verdict] = []
        for function, future in zip(self.functions, futures, strict=True):
            value, verdict = self._collect(function, future, deadline)
            per_function[function.name] = value
            if verdict:
                verdicts.append(verdict)
        if not verdicts and all(value is None for value in per_function.values()):
            verdicts.append(Verdict.of(Rule.REWARD_ERROR, "no reward function returned a value for this rollout"))
        if verdicts:
            return RewardOutcome(reward=None, per_function=per_function, verdicts=verdicts)
        total = sum(f.weight * v for f in self.functions if (v := per_function[f.name]) is not None)
        return RewardOutcome(reward=total, per_function=per_function)

    def _collect(
        self, function: RewardFunction, future: Future, deadline: float
    ) -> tuple[float | None, Verdict | None]:
        name = function.name
        try:
            result = future.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            future.cancel()  # cancels an async call; a sync thread is abandoned (see the module docstring)
            hint = " (an async function that blocks its event loop also times out: make it a plain def)"
            message = f"reward function {name!r} did not return within reward_timeout_s={self.timeout_s:g}s"
            return None, Verdict.of(Rule.REWARD_ERROR, message + (hint if function.is_async else ""),
                                    function=name, kind="timeout")
        except BaseException as error:
            return None, Verdict.of(Rule.REWARD_ERROR, f"reward function {name!r} raised {_one_line(error)}",
                                    function=name, kind="exception", traceback=_user_traceback(error))
        try:
            return _as_number(result), None
        except ValueError as error:
            return None, Verdict.of(Rule.REWARD_ERROR, f"reward function {name!r} {error}", function=name,
                                    kind="bad_value")


def _as_number(result: Any) -> float | None:
    value = result
    if isinstance(result, (list, tuple)):
        if len(result) != 1:
            raise ValueError(f"returned {len(result)} values for 1 completion: return a list with one number")
        value = result[0]
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, complex):
        number = float(value)
        return None if math.isnan(number) else number
    raise ValueError(f"returned {value!r}: return a list with one number (or None) per completion")


def _failed(error: BaseException) -> Future:
    future: Future = Future()
    future.set_exception(error)
    return future


def _one_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}".splitlines()[0]


def _user_traceback(error: BaseException) -> str:
    return "".join(traceback.format_exception(error)[-6:])
