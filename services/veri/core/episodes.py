"""Episodes: a rollout's spans -> one training row, and the named rules that reject or degrade it.

The row (what TRL's `rollout_func` returns for one rollout):

    prompt_ids      = the first chain span's prompt ids (not trained)
    completion_ids  = its completion, then for each later chain span the environment tokens
                      (its prompt minus the previous prompt + completion) and its completion
    logprobs        = the sampled logprobs, 0.0 on environment tokens
    env_mask        = 1 on sampled tokens, 0 on environment tokens (TRL's `env_mask`)

The *chain* is decided on tokens only (a span's `prompt_source` / `bridged_from` labels are shown,
never trusted): span B extends span A when B's prompt starts with A's prompt + completion. The chain
is the longest sequence of spans, each extending the one before, that ends at the final answer (the
last span). Walking back from the final span F, every span F extends is a prefix of F's prompt, so
among those "B extends A" reduces to comparing lengths; the chain is the longest such run ending at F.
Spans off the chain (side calls, turns before a rewritten history) are dropped from the row and each
gets a `history_rewritten` verdict saying which chain span did not extend it and where they differ.

Every rule has a name, an effect and a fix (`RULES`); every verdict lands in the rollout record.
`truncate_episode` applies the job's max_response_length afterwards (`response_truncated`).
Two choices worth knowing:
  - a span without ids *anywhere* rejects the rollout (`token_ids_absent`), not only one on the chain:
    without its tokens nobody can tell whether it was a link of the chain;
  - a span with ids but without logprobs (`logprobs_absent`: the policy returned none, a null among
    them, or fewer than its tokens) rejects the rollout too; its ids still place it on or off the chain;
  - a truncated rollout (killed at harness_timeout_s) is rejected, not kept: see `_status_verdicts`.
A rejected rollout keeps its row when one can be built (for the record and `veri debug`); only
`Episode.rejected` / `RolloutRecord.trainable` say whether it may be trained on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from veri.core.records import TokenFidelity


class Rule(StrEnum):
    NO_SPANS = "no_spans"
    TOKEN_IDS_ABSENT = "token_ids_absent"
    LOGPROBS_ABSENT = "logprobs_absent"
    HARNESS_FAILED = "harness_failed"
    HARNESS_TIMEOUT = "harness_timeout"
    HISTORY_REWRITTEN = "history_rewritten"
    RESPONSE_TRUNCATED = "response_truncated"
    REWARD_ERROR = "reward_error"
    POLICY_VERSION_STALE = "policy_version_stale"


class Effect(StrEnum):
    REJECT = "reject"  # masked out of the loss; the group's other members keep their advantages
    DEGRADE = "degrade"  # trained, but on less than the whole rollout


@dataclass(frozen=True)
class RuleSpec:
    effect: Effect
    summary: str  # what happened, in general
    fix: str  # what to do


RULES: dict[Rule, RuleSpec] = {
    Rule.NO_SPANS: RuleSpec(
        Effect.REJECT,
        "the harness made no model call through the capture proxy",
        "point the harness's SDK at OPENAI_BASE_URL / ANTHROPIC_BASE_URL (no hard-coded endpoint or key);"
        " if it crashed before its first call, read the rollout's log",
    ),
    Rule.TOKEN_IDS_ABSENT: RuleSpec(
        Effect.REJECT,
        "a span has no token ids or logprobs, so the rollout cannot be trained on (and its chain cannot be"
        " verified)",
        "serve the policy with a backend that returns token ids and logprobs (vllm, hf) and send every call"
        " through the capture proxy",
    ),
    Rule.LOGPROBS_ABSENT: RuleSpec(
        Effect.REJECT,
        "a span has token ids but no logprobs for its completion, so the rollout cannot be trained on (GRPO"
        " needs the sampling logprobs)",
        "the policy server returned no logprobs: run vLLM with --logprobs-mode processed_logprobs --max-logprobs -1"
        " as veri's policy image does (or use the hf backend), and keep any gateway in front of it from"
        " dropping `logprobs`",
    ),
    Rule.HARNESS_FAILED: RuleSpec(
        Effect.REJECT,
        "the harness exited non-zero",
        "read the rollout's log and fix the crash; a harness that finishes should exit 0 even with a wrong"
        " answer (the reward judges answers)",
    ),
    Rule.HARNESS_TIMEOUT: RuleSpec(
        Effect.REJECT,
        "the harness ran past harness_timeout_s and its sandbox was killed",
        "raise harness_timeout_s, or lower max_turns / sampling.max_tokens / max_parallel_rollouts (an"
        " overloaded policy slows every rollout); to penalise slow agents, stop the loop in the harness and"
        " exit 0 so the reward scores it",
    ),
    Rule.HISTORY_REWRITTEN: RuleSpec(
        Effect.DEGRADE,
        "a span is not on the token chain that ends at the final answer (the harness edited, trimmed or"
        " reordered its history, or made a side call)",
        "keep the harness's conversation append-only (no trimming, summarising or changed system prompt);"
        " the row trains only on the chain ending at the final answer",
    ),
    Rule.RESPONSE_TRUNCATED: RuleSpec(
        Effect.DEGRADE,
        "the row (every turn's sampled and environment tokens) is longer than max_response_length; it was cut"
        " there, so the end of the rollout is not trained on",
        "raise max_response_length, or lower max_turns / sampling.max_tokens; or make the harness's tool results"
        " shorter",
    ),
    Rule.REWARD_ERROR: RuleSpec(
        Effect.REJECT,
        "a reward function raised, timed out or returned no number",
        "fix the reward function (its error is in the message); raise reward_timeout_s if it is slow on purpose",
    ),
    Rule.POLICY_VERSION_STALE: RuleSpec(
        Effect.REJECT,
        "a span was sampled by a policy version older than the bound (max_staleness versions before the"
        " weights being trained; 0: the step's own), or by one this job never made (a policy server that"
        " restarted with its original weights, or one another job updates): it is not trained",
        "a slow group (max_staleness ≥ 1): raise max_staleness or lower harness_timeout_s; a policy"
        " server that restarted: nothing, the trainer pushes its weights again; if it keeps happening, give"
        " the job its own policy server",
    ),
}


class RolloutStatus(StrEnum):
    """How the harness ended (the launcher's verdict)."""

    COMPLETED = "completed"  # exit 0
    FAILED = "failed"  # non-zero exit
    TRUNCATED = "truncated"  # killed at harness_timeout_s


class Verdict(BaseModel):
    """One rule that fired for one rollout: what happened here, and what to do."""

    model_config = ConfigDict(extra="forbid")

    rule: Rule
    effect: Effect
    message: str
    fix: str
    span: int | None = Field(default=None, description="request_index of the span concerned")
    details: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def of(cls, rule: Rule, message: str, *, span: int | None = None, **details: Any) -> Verdict:
        spec = RULES[rule]
        return cls(rule=rule, effect=spec.effect, message=message, fix=spec.fix, span=span, details=details)


# A span field that cannot be read is read as its default and noted in `EpisodeSpan.unreadable`; when
# it is one of these, the span's ids (or its logprobs) cannot be trusted, so the matching rule fires.
ID_FIELDS = ("span", "prompt_token_ids", "completion_token_ids", "token_fidelity")
LOGPROB_FIELDS = ("completion_logprobs", "logprobs_absent")


class EpisodeSpan(BaseModel):
    """The span fields episodes read. Lenient, so `veri debug` reads any record with these field names."""

    model_config = ConfigDict(extra="ignore")

    request_index: int
    prompt_token_ids: list[int] = Field(default_factory=list)
    completion_token_ids: list[int] = Field(default_factory=list)
    completion_logprobs: list[float] = Field(default_factory=list)
    logprobs_absent: bool = False
    token_fidelity: TokenFidelity = TokenFidelity.CAPTURED
    policy_version: int | None = None
    prompt_source: str | None = None
    bridged_from: int | None = None
    finish_reason: str | None = None
    messages: list[dict[str, Any]] = Field(default_factory=list)
    reply_message: dict[str, Any] = Field(default_factory=dict)
    tool_call_failures: list[dict[str, Any]] = Field(default_factory=list)
    retried_at: list[float] = Field(default_factory=list)
    unreadable: dict[str, str] = Field(
        default_factory=dict, description="field -> what is wrong with it, for fields read as their default"
    )

    @classmethod
    def read(cls, data: Any, position: int) -> EpisodeSpan:
        """A span as a record holds it (a veri `Span`, a dict, or something broken) at `position` in its list.

        Never raises: a field that cannot be read is noted in `unreadable` and read as its default, so
        the rules judge what is left (a null `prompt_token_ids` is `token_ids_absent`, not a crash).
        """
        if isinstance(data, BaseModel):
            data = data.model_dump()
        if not isinstance(data, dict):
            return cls(request_index=position, unreadable={"span": f"the span is {json_kind(data)}, not an object"})
        if data.get("request_index") is None:  # absent, or null in a foreign record: its place in the list
            data = {**data, "request_index": position}
        try:
            return cls.model_validate(data)
        except ValidationError as error:
            unreadable: dict[str, str] = {}
            for problem in error.errors():
                field = str(problem["loc"][0]) if problem["loc"] else "span"
                unreadable.setdefault(field, _what_is_wrong(problem))
            kept = {key: value for key, value in data.items() if key not in unreadable and key != "unreadable"}
            if "request_index" in unreadable:
                kept["request_index"] = position
                unreadable["request_index"] += f" (read as its position, {position})"
            return cls.model_validate({**kept, "unreadable": unreadable})

    @property
    def sequence(self) -> list[int]:
        return self.prompt_token_ids + self.completion_token_ids

    def missing_ids(self) -> str:
        """Why this span's ids cannot be trained on ('' when they can)."""
        if found := next((self.unreadable[field] for field in ID_FIELDS if field in self.unreadable), None):
            return found
        if self.token_fidelity == TokenFidelity.ABSENT:
            return "token_fidelity is 'absent'"
        if not self.prompt_token_ids:
            return "no prompt_token_ids"
        if not self.completion_token_ids:
            return "no completion_token_ids"
        return ""

    def missing_logprobs(self) -> str:
        """Why this span's logprobs cannot be trained on ('' when they can)."""
        if found := next((self.unreadable[field] for field in LOGPROB_FIELDS if field in self.unreadable), None):
            return found
        if self.logprobs_absent:
            return "the policy server returned no logprobs for it"
        if len(self.completion_logprobs) != len(self.completion_token_ids):
            return (
                f"{len(self.completion_logprobs)} completion_logprobs for"
                f" {len(self.completion_token_ids)} completion_token_ids"
            )
        return ""


def json_kind(value: Any) -> str:
    """What a JSON value is, for a message: 'null', 'a string', 'a list', ..."""
    if value is None:
        return "null"
    kinds = {str: "a string", bool: "a boolean", int: "a number", float: "a number", list: "a list", dict: "an object"}
    return kinds.get(type(value), type(value).__name__)


def _what_is_wrong(problem: Any) -> str:
    """One pydantic error as a short phrase: 'prompt_token_ids is null', 'completion_logprobs[3]: ...'."""
    field, *inner = problem["loc"] or ("span",)
    where = str(field) + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in inner)
    if problem["input"] is None:
        return f"{where} is null"
    return f"{where}: {problem['msg'][:1].lower()}{problem['msg'][1:]}"


class TrainingRow(BaseModel):
    """One rollout as TRL trains it (see the module docstring)."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    env_mask: list[int]


class Episode(BaseModel):
    status: RolloutStatus
    chain: list[int] = Field(default_factory=list, description="request_index of the spans in the row, in order")
    dropped: list[int] = Field(default_factory=list, description="spans with ids that are not in the row")
    policy_versions: list[int] = Field(default_factory=list, description="distinct versions over the chain")
    row: TrainingRow | None = Field(default=None, description="None when no trainable chain exists")
    verdicts: list[Verdict] = Field(default_factory=list)

    @property
    def rejected(self) -> bool:
        return self.row is None or any(v.effect == Effect.REJECT for v in self.verdicts)


class Decoder(Protocol):
    def decode(self, token_ids: list[int]) -> str: ...


def as_episode_spans(spans: Iterable[Any]) -> list[EpisodeSpan]:
    """Spans (veri `Span`s or plain dicts with span field names) ordered by request_index.

    A dict without `request_index` takes its position in the list; so does every span when two share one
    (the order is then the list's, and the repeated ones say so).
    """
    parsed = [EpisodeSpan.read(span, position) for position, span in enumerate(spans)]
    repeated = Counter(span.request_index for span in parsed)
    if any(count > 1 for count in repeated.values()):
        parsed = [_by_position(span, at, repeated[span.request_index] > 1) for at, span in enumerate(parsed)]
    return sorted(parsed, key=lambda s: s.request_index)


def _by_position(span: EpisodeSpan, position: int, repeated: bool) -> EpisodeSpan:
    unreadable = dict(span.unreadable)
    if repeated:
        unreadable["request_index"] = (f"request_index {span.request_index} is shared with another span"
                                       f" (read as its position, {position})")
    return span.model_copy(update={"request_index": position, "unreadable": unreadable})


def build_episode(
    spans: Iterable[Any],
    status: RolloutStatus = RolloutStatus.COMPLETED,
    *,
    exit_code: int | None = None,
    decoder: Decoder | None = None,
) -> Episode:
    """Apply every rule to one rollout; `decoder` (a tokenizer) adds decoded text to token differences."""
    ordered = as_episode_spans(spans)
    verdicts = _status_verdicts(status, exit_code)
    if not ordered:
        verdicts.append(Verdict.of(Rule.NO_SPANS, RULES[Rule.NO_SPANS].summary))
        return Episode(status=status, verdicts=verdicts)

    absent = [(span, span.missing_ids()) for span in ordered if span.missing_ids()]
    for span, why in absent:
        message = f"span {span.request_index} cannot be trained on: {why}"
        verdicts.append(Verdict.of(Rule.TOKEN_IDS_ABSENT, message, span=span.request_index))
    present = [span for span in ordered if not span.missing_ids()]
    no_logprobs = [(span, span.missing_logprobs()) for span in present if span.missing_logprobs()]
    for span, why in no_logprobs:
        message = f"span {span.request_index} cannot be trained on: {why}"
        verdicts.append(Verdict.of(Rule.LOGPROBS_ABSENT, message, span=span.request_index))
    chain = _longest_chain(present) if present else []
    in_chain = {span.request_index for span in chain}
    dropped = [span for span in present if span.request_index not in in_chain]
    verdicts += [_dropped_verdict(span, chain, decoder) for span in dropped]
    return Episode(
        status=status,
        chain=[span.request_index for span in chain],
        dropped=[span.request_index for span in dropped],
        policy_versions=sorted({s.policy_version for s in chain if s.policy_version is not None}),
        row=None if absent or no_logprobs or not chain else _row(chain),
        verdicts=verdicts,
    )


def truncate_episode(episode: Episode, max_length: int) -> Episode:
    """The episode with its row cut to `max_length` completion tokens (a `response_truncated` verdict).

    Environment tokens left at the end of the cut are dropped too: they are not trained on, so the row
    ends on the last sampled token it keeps. An episode whose row fits is returned unchanged.
    """
    row = episode.row
    if row is None or len(row.completion_ids) <= max_length:
        return episode
    keep = max_length
    while keep > 0 and row.env_mask[keep - 1] == 0:
        keep -= 1
    cut = TrainingRow(
        prompt_ids=row.prompt_ids, completion_ids=row.completion_ids[:keep], logprobs=row.logprobs[:keep],
        env_mask=row.env_mask[:keep],
    )
    sampled = sum(row.env_mask)
    message = (
        f"the row has {len(row.completion_ids)} completion tokens ({sampled} sampled), more than"
        f" max_response_length={max_length}: kept the first {keep} ({sum(cut.env_mask)} sampled)"
    )
    verdict = Verdict.of(Rule.RESPONSE_TRUNCATED, message, length=len(row.completion_ids), kept=keep)
    return episode.model_copy(update={"row": cut, "verdicts": [*episode.verdicts, verdict]})


def extends(later: EpisodeSpan, earlier: EpisodeSpan) -> bool:
    """True when `later`'s prompt starts with `earlier`'s prompt + completion (token for token)."""
    prefix = earlier.sequence
    return len(later.prompt_token_ids) >= len(prefix) and later.prompt_token_ids[: len(prefix)] == prefix


def _status_verdicts(status: RolloutStatus, exit_code: int | None) -> list[Verdict]:
    if status == RolloutStatus.FAILED:
        code = f" (exit code {exit_code})" if exit_code is not None else ""
        return [Verdict.of(Rule.HARNESS_FAILED, f"the harness exited non-zero{code}", exit_code=exit_code)]
    if status == RolloutStatus.TRUNCATED:
        # Rejected, not kept: a wall-clock kill depends on load (policy queue, parallel rollouts, the
        # web), not only on the policy, and the unfinished run has no final answer to score. Counting
        # it as a failure would feed infrastructure noise into the group's advantages.
        return [Verdict.of(Rule.HARNESS_TIMEOUT, RULES[Rule.HARNESS_TIMEOUT].summary)]
    return []


def _longest_chain(spans: Sequence[EpisodeSpan]) -> list[EpisodeSpan]:
    """The longest run of spans, each extending the previous, that ends at the last span."""
    final = spans[-1]
    # Every candidate's prompt + completion is a prefix of the final prompt, so between candidates
    # "b extends a" is just len(b.prompt) >= len(a.prompt + a.completion).
    candidates = [span for span in spans[:-1] if extends(final, span)] + [final]
    length = [1] * len(candidates)
    previous: list[int | None] = [None] * len(candidates)
    for b, later in enumerate(candidates):
        for a in range(b):
            earlier = candidates[a]
            if len(later.prompt_token_ids) >= len(earlier.sequence) and length[a] + 1 >= length[b]:
                length[b], previous[b] = length[a] + 1, a  # on ties, the later predecessor wins
    chain: list[EpisodeSpan] = []
    at: int | None = len(candidates) - 1
    while at is not None:
        chain.append(candidates[at])
        at = previous[at]
    return chain[::-1]


def _row(chain: Sequence[EpisodeSpan]) -> TrainingRow:
    first = chain[0]
    completion, logprobs = list(first.completion_token_ids), list(first.completion_logprobs)
    mask = [1] * len(completion)
    for earlier, span in zip(chain, chain[1:], strict=False):
        environment = span.prompt_token_ids[len(earlier.sequence) :]
        completion += environment + span.completion_token_ids
        logprobs += [0.0] * len(environment) + span.completion_logprobs
        mask += [0] * len(environment) + [1] * len(span.completion_token_ids)
    return TrainingRow(
        prompt_ids=list(first.prompt_token_ids), completion_ids=completion, logprobs=logprobs, env_mask=mask
    )


def _dropped_verdict(span: EpisodeSpan, chain: Sequence[EpisodeSpan], decoder: Decoder | None) -> Verdict:
    """Why `span` is off the chain: the first chain span after it does not extend it."""
    after = next(c for c in chain if c.request_index > span.request_index)
    difference = first_difference(span.sequence, after.prompt_token_ids, decoder)
    claimed = f"labelled {after.prompt_source or 'unknown'}"
    if after.bridged_from is not None:
        claimed += f" from span {after.bridged_from}"
    if difference["position"] is None:
        what = "its tokens are covered by a longer chain through other spans"
    else:
        what = f"span {after.request_index} ({claimed}) does not extend it: {difference['summary']}"
    message = f"span {span.request_index} dropped from the row: {what}"
    return Verdict.of(
        Rule.HISTORY_REWRITTEN, message, span=span.request_index, broken_by=after.request_index, **difference
    )


def first_difference(expected: list[int], actual: list[int], decoder: Decoder | None = None) -> dict[str, Any]:
    """Where `actual` stops starting with `expected`: position, both token ids, decoded text, a summary.

    `position` is None when `actual` does start with `expected`.
    """
    limit = min(len(expected), len(actual))
    position = next((i for i in range(limit) if expected[i] != actual[i]), limit)
    if position == len(expected):
        return {"position": None, "expected_id": None, "actual_id": None, "summary": "no difference"}
    expected_id = expected[position]
    actual_id = actual[position] if position < len(actual) else None
    found: dict[str, Any] = {"position": position, "expected_id": expected_id, "actual_id": actual_id}
    if decoder is not None:
        found["expected_text"] = decoder.decode([expected_id])
        found["actual_text"] = decoder.decode([actual_id]) if actual_id is not None else None
        found["context"] = decoder.decode(expected[max(0, position - 12) : position])
    found["summary"] = _describe_difference(found)
    return found


def _describe_difference(found: dict[str, Any]) -> str:
    def token(key: str) -> str:
        text = f" {found[key + '_text']!r}" if found.get(key + "_text") is not None else ""
        return f"{found[key + '_id']}{text}"

    where = f"at position {found['position']}"
    if "context" in found:
        where += f" (after {found['context']!r})"
    if found["actual_id"] is None:
        return f"its prompt ends {where}, where the earlier span has {token('expected')}"
    return f"first different token {where}: earlier span has {token('expected')}, this prompt has {token('actual')}"
