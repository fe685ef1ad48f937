"""Episodes: a rollout's spans -> its training rows, and the named rules that reject or degrade it.

The rows are the rollout's span tree cut into chains (`core.branches`: every sampled token in exactly
one row). `Episode.row` is the chain that ends at the final answer (the last span), `Episode.chain` its
spans; `Episode.branches` holds every other chain (a sub-agent, a side call, the history before a
compaction or a rewrite), each labelled with how it began. Each row:

    prompt_ids      = the chain's first prompt (not trained)
    completion_ids  = its completion, then for each later span the environment tokens
                      (its prompt minus the previous prompt + completion) and its completion
    logprobs        = the sampled logprobs, 0.0 on environment tokens
    env_mask        = 1 on sampled tokens, 0 on environment tokens (TRL's `env_mask`)

Chains are decided on tokens only (a span's `prompt_source` / `bridged_from` labels are shown, never
trusted). Records written before branches existed kept only the final chain and gave every other span a
`history_rewritten` verdict; they read as before.

Every rule has a name, an effect and a fix (`core/rules.py`); every verdict lands in the rollout record.
`truncate_episode` applies the job's max_response_length to each row afterwards (`response_truncated`).
Choices worth knowing:
  - a span without ids *anywhere* rejects the rollout (`token_ids_absent`), not only one on the chain:
    without its tokens nobody can tell which chain it belongs to;
  - a span with ids but without logprobs (`logprobs_absent`: the policy returned none, a null among
    them, or fewer than its tokens) rejects the rollout too; its ids still place it in a chain;
  - a truncated rollout (killed at harness_timeout_s) is rejected, not kept: see `_status_verdicts`.
A rejected rollout keeps its rows when they can be built (for the record and `veri debug`); only
`Episode.rejected` / `RolloutRecord.trainable` say whether it may be trained on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from veri.core.branches import (
    Branch,
    Decoder,
    RowKind,
    TrainingRow,
    branch,
    chain_row,
    chains,
    extends,
    first_difference,
)
from veri.core.records import TokenFidelity
from veri.core.rules import RULES, VERIFIER_RULES, Effect, Rule, Verdict, VerifierError

if TYPE_CHECKING:  # core/launch.py imports this module (RolloutStatus)
    from veri.core.launch import VerifierResult

__all__ = ["Branch", "Decoder", "RowKind", "TrainingRow", "extends", "first_difference"]


class RolloutStatus(StrEnum):
    """How the harness ended (the launcher's verdict)."""

    COMPLETED = "completed"  # exit 0
    FAILED = "failed"  # non-zero exit
    TRUNCATED = "truncated"  # killed at harness_timeout_s


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
    stop_sequence: str | None = None
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


class Episode(BaseModel):
    status: RolloutStatus
    chain: list[int] = Field(default_factory=list, description="request_index of the spans in the row, in order")
    chain_kind: RowKind = Field(default=RowKind.MAIN, description="how the chain ending at the final answer began")
    chain_why: str = Field(default="", description="the same, in words")
    chain_forks_from: int | None = Field(default=None, description="the earlier span it shares the most tokens with")
    chain_shared_tokens: int = Field(default=0, description="leading tokens it shares with that span")
    dropped: list[int] = Field(default_factory=list, description="spans with ids that are in no row (older records)")
    policy_versions: list[int] = Field(default_factory=list, description="distinct versions over every row")
    row: TrainingRow | None = Field(default=None, description="None when no trainable chain exists")
    branches: list[Branch] = Field(default_factory=list, description="the other chains, each a row of its own")
    verdicts: list[Verdict] = Field(default_factory=list)

    @property
    def rows(self) -> list[TrainingRow]:
        """Every row of the rollout: the final chain's first, then the branches' (in their order)."""
        found = [self.row] if self.row is not None else []
        return found + [b.row for b in self.branches if b.row is not None]

    @property
    def rejected(self) -> bool:
        return self.row is None or any(v.effect == Effect.REJECT for v in self.verdicts)


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
    verifier: VerifierResult | None = None,
) -> Episode:
    """Apply every rule to one rollout; `decoder` (a tokenizer) adds decoded text to token differences;
    `verifier`: a Harbor task's verification (LaunchResult.verifier)."""
    ordered = as_episode_spans(spans)
    verdicts = _status_verdicts(status, exit_code) + verifier_verdicts(verifier)
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
    found = chains(present)
    final = next((chain for chain in found if chain[-1] is present[-1]), []) if present else []
    trainable = not (absent or no_logprobs)
    labelled = {id(chain[0]): branch(chain, present, trainable=trainable, decoder=decoder) for chain in found}
    return Episode(
        status=status,
        chain=[span.request_index for span in final],
        chain_kind=labelled[id(final[0])].kind if final else RowKind.MAIN,
        chain_why=labelled[id(final[0])].why if final else "",
        chain_forks_from=labelled[id(final[0])].forks_from if final else None,
        chain_shared_tokens=labelled[id(final[0])].shared_tokens if final else 0,
        policy_versions=sorted({s.policy_version for s in present if s.policy_version is not None}),
        row=chain_row(final) if trainable and final else None,
        branches=[labelled[id(chain[0])] for chain in found if chain is not final],
        verdicts=verdicts,
    )


def truncate_episode(episode: Episode, max_length: int) -> Episode:
    """The episode with each row cut to `max_length` completion tokens (a `response_truncated` verdict).

    Environment tokens left at the end of a cut are dropped too: they are not trained on, so the row
    ends on the last sampled token it keeps. An episode whose rows fit is returned unchanged.
    """
    update: dict[str, Any] = {}
    verdicts = list(episode.verdicts)
    if episode.row is not None and len(episode.row.completion_ids) > max_length:
        update["row"], verdict = _cut(episode.row, max_length, "the row")
        verdicts.append(verdict)
    branches = []
    for found in episode.branches:
        if found.row is not None and len(found.row.completion_ids) > max_length:
            cut, verdict = _cut(found.row, max_length, f"the {found.kind} row from span {found.spans[0]}")
            found = found.model_copy(update={"row": cut})
            verdicts.append(verdict.model_copy(update={"span": found.spans[0]}))
        branches.append(found)
    if len(verdicts) == len(episode.verdicts):
        return episode
    return episode.model_copy(update={**update, "branches": branches, "verdicts": verdicts})


def unfinished_rows(episode: Episode, spans: Iterable[Any]) -> list[str]:
    """Each row of the rollout that ends before the policy finished it, in words ([] when none does).

    A row ends unfinished when its last call was cut by the policy (finish_reason `length`, or another cut
    such as vLLM's repetition stop) or when the row was cut at max_response_length (`response_truncated`).
    A reply the client's own stop sequence ended is finished (`stop_sequence`: the proxy cut the ids there
    on the client's word), though its last token is no EOS. TRL's `mask_truncated_completions` asks this
    of the one row in its slot, by its last token; veri asks it of every row of the rollout.
    """
    by_index = {span.request_index: span for span in as_episode_spans(spans)}
    ends = [("the row", episode.chain)] if episode.row is not None else []
    ends += [(f"the {b.kind} row from span {b.spans[0]}", b.spans) for b in episode.branches if b.row is not None]
    found = []
    for which, chain in ends:
        last = by_index.get(chain[-1]) if chain else None
        if last is not None and last.finish_reason not in (None, "stop") and last.stop_sequence is None:
            found.append(f"{which} ends with span {last.request_index}, which the policy cut"
                         f" (finish_reason {last.finish_reason})")
    return found + [v.message for v in episode.verdicts if v.rule == Rule.RESPONSE_TRUNCATED]


def _cut(row: TrainingRow, max_length: int, which: str) -> tuple[TrainingRow, Verdict]:
    keep = max_length
    while keep > 0 and row.env_mask[keep - 1] == 0:
        keep -= 1
    cut = TrainingRow(
        prompt_ids=row.prompt_ids, completion_ids=row.completion_ids[:keep], logprobs=row.logprobs[:keep],
        env_mask=row.env_mask[:keep],
    )
    sampled = sum(row.env_mask)
    message = (
        f"{which} has {len(row.completion_ids)} completion tokens ({sampled} sampled), more than"
        f" max_response_length={max_length}: kept the first {keep} ({sum(cut.env_mask)} sampled)"
    )
    return cut, Verdict.of(Rule.RESPONSE_TRUNCATED, message, length=len(row.completion_ids), kept=keep)


def verifier_verdicts(verifier: VerifierResult | None) -> list[Verdict]:
    """The verdict of a task's verifier that gave no reward ([] when it gave one, or there is none)."""
    if verifier is None or verifier.error is VerifierError.NONE:
        return []
    rule = VERIFIER_RULES[verifier.error]
    message = verifier.message or RULES[rule].summary
    details: dict[str, Any] = {"exit_code": verifier.exit_code, "duration_s": round(verifier.duration_s, 3)}
    if verifier.stdout_tail:
        details["test_stdout_tail"] = verifier.stdout_tail[-2000:]
    if verifier.stderr_tail:
        details["verifier_stderr_tail"] = verifier.stderr_tail[-2000:]
    return [Verdict.of(rule, message, **details)]


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
