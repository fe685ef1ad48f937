"""A rollout's spans as a tree -> training rows: every sampled token in exactly one row.

Harnesses do not talk in one chain: sub-agents open conversations of their own, side calls (titles,
summaries) use another system prompt, compaction replaces the history, thinking templates resend earlier
replies changed. Here the spans (ordered by request_index) are cut into *chains*, decided on token ids
only: a span joins the chain whose last span it extends (its prompt starts with that span's prompt +
completion; the longest such tail wins), or it starts a chain of its own. Each chain is one row:

    prompt_ids      = the chain's first prompt (not trained)
    completion_ids  = its completion, then for each later span the environment tokens (its prompt minus
                      the previous prompt + completion) and its completion
    env_mask        = 1 on sampled tokens, 0 on environment tokens

so every span's completion is trained in exactly one row, and a span later extended is not trained
again. A chain that forks from the tree (a new root) carries the tokens it shares with earlier spans in
its prompt: seen as context, never trained twice. Rows are not packed (TRL's GRPOTrainer has no tree
attention); the shared prefix costs one more forward pass, not one more gradient.

Each row is labelled by how it began (`RowKind`), from its first span against the spans before it:
    main        the chain that starts at the rollout's first call
    sub_agent   its last reply comes back inside a later call's tool result (Claude Code's Agent tool)
    compaction  same system prompt, the history after it replaced (a summary)
    rewritten   the prompt repeats an earlier reply changed (thinking stripped) or resumes an earlier turn
    side_call   another system prompt, whose reply never comes back (titles, summaries)
A client retry is not a branch: the proxy answers it from the span it already has (`Span.retried_at`).

Loss weight: all rows of a rollout share its advantage, and TRL's default loss (dapo) normalises by the
batch's trained tokens, so a rollout weighs by its sampled tokens, not by its number of rows: five rows
do not count five times (docs/branches.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any, Protocol

from pydantic import BaseModel, Field


class Decoder(Protocol):
    def decode(self, token_ids: list[int]) -> str: ...


class ChainSpan(Protocol):
    request_index: int
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    completion_logprobs: list[float]
    messages: list[dict[str, Any]]
    reply_message: dict[str, Any]

    @property
    def sequence(self) -> list[int]: ...


class TrainingRow(BaseModel):
    """One row as TRL trains it (see the module docstring)."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    env_mask: list[int]


class RowKind(StrEnum):
    MAIN = "main"
    SUB_AGENT = "sub_agent"
    COMPACTION = "compaction"
    REWRITTEN = "rewritten"
    SIDE_CALL = "side_call"


class Branch(BaseModel):
    """A row besides the one ending at the final answer: which spans, how it began, and its tokens."""

    kind: RowKind
    spans: list[int] = Field(description="request_index of the spans in the row, in order")
    forks_from: int | None = Field(default=None, description="the earlier span it shares the most tokens with")
    shared_tokens: int = Field(default=0, description="leading tokens it shares with that span (in its prompt)")
    why: str = Field(default="", description="how the row began, in words")
    row: TrainingRow | None = Field(default=None, description="None when the rollout has no trainable row")


def chains(spans: Sequence[ChainSpan]) -> list[list[ChainSpan]]:
    """The spans cut into chains, each span in exactly one, ordered by their first span."""
    found: list[list[ChainSpan]] = []
    for span in spans:
        tails = [chain for chain in found if extends(span, chain[-1])]
        if tails:
            max(tails, key=lambda chain: len(chain[-1].sequence)).append(span)
        else:
            found.append([span])
    return found


def extends(later: ChainSpan, earlier: ChainSpan) -> bool:
    """True when `later`'s prompt starts with `earlier`'s prompt + completion (token for token)."""
    prefix = earlier.sequence
    return len(later.prompt_token_ids) >= len(prefix) and later.prompt_token_ids[: len(prefix)] == prefix


def chain_row(chain: Sequence[ChainSpan]) -> TrainingRow:
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


def branch(
    chain: Sequence[ChainSpan], spans: Sequence[ChainSpan], *, trainable: bool, decoder: Decoder | None = None
) -> Branch:
    """`chain` (not the one ending at the final answer) labelled against every span of the rollout."""
    root = chain[0]
    earlier = [span for span in spans if span.request_index < root.request_index]
    row = chain_row(chain) if trainable else None
    indices = [span.request_index for span in chain]
    later = [span for span in spans if span.request_index > chain[-1].request_index]
    if root.request_index == spans[0].request_index:
        return Branch(kind=RowKind.MAIN, spans=indices, why="the conversation the harness began with", row=row)
    closest = max(earlier, key=lambda span: (_shared(root.prompt_token_ids, span.sequence), span.request_index))
    shared = _shared(root.prompt_token_ids, closest.sequence)
    base: dict[str, Any] = {"spans": indices, "forks_from": closest.request_index, "shared_tokens": shared, "row": row}
    differs = first_difference(closest.sequence, root.prompt_token_ids, decoder)["summary"]
    if (returned := _returned_in(chain[-1], later)) is not None:
        return Branch(kind=RowKind.SUB_AGENT, why=f"its reply comes back in span {returned}'s tool result", **base)
    if shared >= len(closest.prompt_token_ids):
        where = "resumes after" if shared == len(closest.sequence) else "changes the reply of"
        return Branch(kind=RowKind.REWRITTEN, why=f"it {where} span {closest.request_index}"
                      f" (first {shared} tokens shared; {differs})", **base)
    if shared and _system(root) is not None and _system(root) == _system(closest):
        return Branch(kind=RowKind.COMPACTION, why=f"same system prompt as span {closest.request_index}, the"
                      f" history after it replaced ({differs})", **base)
    shares = f"; {differs}" if shared else ""
    return Branch(kind=RowKind.SIDE_CALL, why=f"another system prompt (or none to compare); shares {shared} tokens"
                  f" with span {closest.request_index}{shares}", **base)


def _shared(a: Sequence[int], b: Sequence[int]) -> int:
    limit = min(len(a), len(b))
    return next((i for i in range(limit) if a[i] != b[i]), limit)


def _system(span: ChainSpan) -> str | None:
    """The span's system prompt text, when its messages say (OpenAI role system/developer, or the first)."""
    for message in span.messages[:1]:
        if message.get("role") in ("system", "developer"):
            return _text(message.get("content"))
    return None


def _returned_in(last: ChainSpan, later: Sequence[ChainSpan]) -> int | None:
    """The first later span whose non-assistant messages contain `last`'s reply text (a sub-agent's result)."""
    reply = _text(last.reply_message.get("content")).strip()
    if len(reply) < 8:  # too short to tell a returned result from a coincidence
        return None
    for span in later:
        if any(reply in _text(message) for message in span.messages if message.get("role") != "assistant"):
            return span.request_index
    return None


def _text(value: Any) -> str:
    """Every string inside a message or content value, joined (OpenAI strings, Anthropic blocks)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(_text(item) for item in value)
    if isinstance(value, dict):
        return "\n".join(_text(item) for key, item in value.items() if key not in ("role", "type", "id", "name"))
    return ""


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
