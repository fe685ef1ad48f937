"""Reward functions: loaded from the job's files or inline source, called TRL-style per rollout.

The calling convention mirrors TRL 1.16's `GRPOTrainer._calculate_rewards` for a batch of one:

    reward(prompts=[prompt], completions=[completion], completion_ids=[ids], **{column: [value]},
           trainer_state=..., log_extra=..., log_metric=...)  ->  [number or None]

`completion` is the final answer: the last span's reply as a one-message list when the task's prompt is
a message list (TRL's conversational format), or its text when the prompt is text. Dataset columns
other than `prompt` come as lists. Two extra inputs go only to functions that declare them:
`trajectory` (the whole conversation: the final call's messages, tool results included, plus the
reply), `outputs` (the folder the harness left in VERI_OUTPUT_DIR) and `verifier` (a Harbor task's
tests: `[{"reward": 1.0, "correctness": 1.0, ...}]`, reward.json's numbers and `reward`; `[None]` when the
rollout is no task or its verifier gave no reward). A function with `**kwargs`
gets everything else; one without gets exactly the names it declares. A bare number is accepted
as well as a one-element list; None (or NaN) means "no value from this function".

Timeouts: every call runs off the caller's thread and is waited for at most `reward_timeout_s`.
Async functions share one event loop on a daemon thread (as in TRL, so clients they cache keep
working) and are cancelled on timeout. Sync functions each run on a daemon thread that is abandoned
on timeout: Python cannot kill a thread, so a hung function keeps its thread until it returns, but
the job goes on and the daemon thread cannot block exit. (A subprocess could be killed, but would
re-import the function per call, lose any state it caches, and need picklable inputs.) An exception,
a timeout, a non-number, an infinity or the wrong number of values is a `reward_error` verdict (an
async function's SystemExit too, kept from stopping the shared loop): that rollout is masked, the
job continues.
Calls for different rollouts run concurrently, so a sync function must tolerate that.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veri.core.dataset import PROMPT
from veri.core.episodes import EpisodeSpan, as_episode_spans
from veri.core.rollout_record import RolloutRecord

# What a reward function can ask for besides dataset columns. (TRL also passes `environments`,

# which veri has no equivalent for.)
STANDARD_INPUTS = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric")
DECLARED_ONLY = ("trajectory", "outputs", "verifier")  # passed only to functions that name them


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
    verifier: dict[str, float] | None = None  # a Harbor task's verifier scores (VerifierRecord.scores)
    extra: dict[str, Any] = field(default_factory=dict)  # trainer_state, log_extra, log_metric

    @classmethod
    def from_record(cls, record: RolloutRecord, *, outputs: Path | None = None, **extra: Any) -> RewardInputs:
        row = record.episode.row
        ids = row.completion_ids if row is not None else None
        inputs = cls.from_spans(record.task, record.spans, ids, outputs=outputs, **extra)
        inputs.verifier = record.verifier.scores() if record.verifier is not None else None
        return inputs

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
            "verifier": [self.verifier],
            **self.extra,
        }


def one_line(error: BaseException) -> str:
    """An exception as one line: its type and the first line of its message."""
    return f"{type(error).__name__}: {error}".splitlines()[0]
