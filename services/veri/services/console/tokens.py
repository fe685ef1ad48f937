"""The token view: one of a rollout's training rows token by token, as the trainer trains it.

A rollout has one row per chain of its span tree (`core.branches`): row 1 ends at the final answer,
rows 2.. are its branches (sub-agents, side calls, the history before a compaction or a rewrite). The
view lists every row with how it began and shows the selected one; a row that forked from the tree
marks the token where it stopped sharing the earlier span's tokens.

The row is the record's `episode.row`, built by `core.episodes` (the trainer's own builder; TRL gets it
through `trainer.grpo.rows.rollout_output`): nothing here re-derives a mask. `env_mask` 1 = a sampled
token, trained when the record is trainable; 0 = an environment token (tool results, new turns), never
trained; the prompt is never trained. A record that is not trainable is trained on none of its tokens
(the trainer sends a masked placeholder row instead), so every token shows as masked.

Span boundaries come from the chain (`episode.chain`): the first span's prompt and completion, then each
later span's environment tokens and completion. A `history_rewritten` verdict names the chain span that
did not extend a dropped span and the position where they differ: the exact token where the prefix
broke, marked in the row with why.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from html import escape
from typing import Any

from markupsafe import Markup

from veri.core.records import Span
from veri.core.rollout_record import RolloutRecord
from veri.core.rules import Rule
from veri.services.console.decoder import TokenDecoder


@dataclass(slots=True)
class TokenCell:
    position: int  # in prompt + completion
    id: int
    text: str | None
    kind: str  # prompt | sampled | environment
    trained: bool
    logprob: float | None  # sampled tokens only
    span: int | None  # request_index of the chain span the token belongs to
    starts_span: bool = False
    breaks: str | None = None  # why the prefix broke here (a history_rewritten verdict)


@dataclass
class PrefixBreak:
    dropped_span: int
    broken_by: int
    position: int | None
    in_row: bool
    message: str
    fix: str
    expected: str  # what the dropped span had at the position (id and text)
    actual: str  # what the chain span has there


@dataclass
class TokenView:
    cells: list[TokenCell]
    trainable: bool
    why_masked: str  # '' when trainable
    breaks: list[PrefixBreak] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # other verdicts that shaped the row (truncation)
    spans: list[dict[str, Any]] = field(default_factory=list)  # chain spans: index, label, tokens
    decoded: bool = False
    rows: list[dict[str, Any]] = field(default_factory=list)  # every row: number, kind, spans, why, sampled
    selected: int = 1  # the row shown
    fork: dict[str, Any] | None = None  # where the shown row forked: position, from span, why
    tokens_line: str = ""  # sampled / trained / dropped (`core.token_account`)

    @property
    def counts(self) -> dict[str, int]:
        trained = sum(cell.trained for cell in self.cells)
        prompt = sum(cell.kind == "prompt" for cell in self.cells)
        return {"tokens": len(self.cells), "prompt": prompt, "trained": trained,
                "masked": len(self.cells) - prompt - trained}

    def as_dict(self) -> dict[str, Any]:
        return {
            "trainable": self.trainable, "why_masked": self.why_masked, "counts": self.counts,
            "breaks": [vars(item) for item in self.breaks], "notes": self.notes, "spans": self.spans,
            "tokens": [asdict(cell) for cell in self.cells], "rows": self.rows, "selected": self.selected,
            "fork": self.fork, "tokens_line": self.tokens_line,
        }


def token_view(record: RolloutRecord, decoder: TokenDecoder | None, number: int = 1) -> TokenView:
    """Row `number` of the record (1: the one ending at the final answer; 2..: its branches)."""
    episode = record.episode
    rejecting = sorted({str(v.rule) for v in record.verdicts if v.effect in ("reject", "mask")})
    why = "" if record.trainable else (
        f"not trained: {', '.join(rejecting)}" if rejecting else "not trained: the rollout has no reward")
    rows = _rows(record)
    if not 1 <= number <= max(1, len(rows)):
        raise ValueError(f"row {number} does not exist: this rollout has {len(rows)} row(s)")
    if number == 1:
        row, chain = episode.row, episode.chain
        fork = (episode.chain_forks_from, episode.chain_shared_tokens, episode.chain_why)
    else:
        branch = [b for b in episode.branches if b.row is not None][number - 2]
        row, chain, fork = branch.row, branch.spans, (branch.forks_from, branch.shared_tokens, branch.why)
    extra = {"rows": rows, "selected": number, "tokens_line": record.tokens.line()}
    if row is None:
        return TokenView([], record.trainable, why or "not trained: no training row", notes=_notes(record), **extra)
    ids = [*row.prompt_ids, *row.completion_ids]
    texts = decoder.pieces(ids) if decoder else [None] * len(ids)
    owners, starts = _span_owners(record, chain, len(row.prompt_ids), len(ids))
    prompt_length, trainable = len(row.prompt_ids), record.trainable
    start_positions = set(starts.values())
    cells = []
    for position, token in enumerate(ids):
        sampled = position >= prompt_length and row.env_mask[position - prompt_length] == 1
        kind = "prompt" if position < prompt_length else ("sampled" if sampled else "environment")
        cells.append(TokenCell(
            position=position, id=token, text=texts[position], kind=kind, trained=trainable and sampled,
            logprob=row.logprobs[position - prompt_length] if sampled else None, span=owners[position],
            starts_span=position in start_positions,
        ))
    breaks = _breaks(record, cells, decoder) if number == 1 else []
    forked = None
    if fork[0] is not None:
        forks_from, shared, reason = fork
        forked = {"from_span": forks_from, "position": shared, "why": reason}
        if shared < len(cells):
            cells[shared].breaks = f"row {number} forks from span {forks_from} here: {reason}"
    by_index = {span.request_index: span for span in record.spans}
    spans = [{"index": index, "label": span_label(by_index[index]), "starts_at": starts.get(index)}
             for index in chain]
    return TokenView(cells, trainable, why, breaks, _notes(record), spans, decoded=decoder is not None,
                     fork=forked, **extra)


def _rows(record: RolloutRecord) -> list[dict[str, Any]]:
    episode = record.episode
    found = []
    if episode.row is not None:
        found.append({"number": 1, "kind": str(episode.chain_kind), "spans": episode.chain,
                      "why": episode.chain_why, "sampled": sum(episode.row.env_mask), "final": True})
    for branch in (b for b in episode.branches if b.row is not None):
        found.append({"number": len(found) + 1, "kind": str(branch.kind), "spans": branch.spans, "why": branch.why,
                      "sampled": sum(branch.row.env_mask), "final": False})
    return found


def span_label(span: Span) -> str:
    label = f"span {span.request_index}: {span.prompt_source}"
    if span.bridged_from is not None:
        label += f" from span {span.bridged_from}"
    return f"{label} ({span.prompt_source_reason}), policy v{span.policy_version}"


def _span_owners(
    record: RolloutRecord, indices: list[int], prompt_length: int, total: int
) -> tuple[list[int | None], dict[int, int]]:
    """Per row position, the chain span its token came from; and where each chain span's tokens start."""
    by_index = {span.request_index: span for span in record.spans}
    chain = [by_index[index] for index in indices]
    owners: list[int | None] = []
    starts: dict[int, int] = {}
    if not chain:
        return [None] * total, starts
    first = chain[0]
    starts[first.request_index] = 0
    owners += [first.request_index] * (prompt_length + len(first.completion_token_ids))
    for earlier, span in zip(chain, chain[1:], strict=False):
        starts[span.request_index] = len(owners)
        earlier_length = len(earlier.prompt_token_ids) + len(earlier.completion_token_ids)
        environment = len(span.prompt_token_ids) - earlier_length
        owners += [span.request_index] * (environment + len(span.completion_token_ids))
    owners = owners[:total] + [None] * max(0, total - len(owners))  # a truncated row is shorter
    return owners, {index: at for index, at in starts.items() if at < total}


def _breaks(record: RolloutRecord, cells: list[TokenCell], decoder: TokenDecoder | None) -> list[PrefixBreak]:
    found = []
    for verdict in record.verdicts:
        if verdict.rule != Rule.HISTORY_REWRITTEN or verdict.span is None:
            continue
        details = verdict.details
        position = details.get("position")
        in_row = isinstance(position, int) and position < len(cells)
        if isinstance(position, int) and in_row:
            cells[position].breaks = verdict.message
        found.append(PrefixBreak(
            dropped_span=verdict.span, broken_by=details.get("broken_by", -1), position=position, in_row=in_row,
            message=verdict.message, fix=verdict.fix,
            expected=_token(details.get("expected_id"), decoder), actual=_token(details.get("actual_id"), decoder),
        ))
    return found


def _token(token: int | None, decoder: TokenDecoder | None) -> str:
    if token is None:
        return "(the prompt ends there)"
    return f"{token} {decoder.pieces([token])[0]!r}" if decoder else str(token)


def _notes(record: RolloutRecord) -> list[str]:
    return [f"{v.rule}: {v.message}" for v in record.verdicts if v.rule != Rule.HISTORY_REWRITTEN]


def cells_html(cells: list[TokenCell]) -> Markup:
    """The token strip as HTML, joined here instead of in a Jinja loop (a 16k-token row would cost several
    times as much there). Each token carries its id and logprob as data attributes; console.js turns
    them into hover titles, so the page stays small."""
    parts = []
    for cell in cells:
        if cell.starts_span:
            parts.append(f'<span class="span-start" id="span-{cell.span}">span {cell.span}</span>')
        classes = f"t {cell.kind}{' trained' if cell.trained else ''}{' break' if cell.breaks else ''}"
        logprob = f' data-lp="{cell.logprob:.4f}"' if cell.logprob is not None else ""
        why = f' title="BREAK: {escape(cell.breaks)}"' if cell.breaks else ""
        text = escape(cell.text) if cell.text is not None else f"{cell.id} "
        parts.append(f'<span class="{classes}" data-id="{cell.id}"{logprob}{why}>{text}</span>')
    return Markup("".join(parts))
