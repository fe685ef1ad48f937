"""`veri debug`: walk the episode rules over downloaded rollout records and explain each verdict.

Reads veri's own records (archive JSONL lines) or any JSON with a `spans` list using veri's span
field names (prompt_token_ids, completion_token_ids, completion_logprobs, request_index, ...), and
also a bare list of spans, as `veri session spans` prints.

It never stops on a record it is handed: a span with null or missing fields gets the verdict it
deserves (`token_ids_absent`, `logprobs_absent`) and a note for anything else it could not read; a
record that cannot be walked at all (a truncated JSON line, no `spans` list) is one line saying what
is wrong, and the walk goes on to the next record.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from veri.core.episodes import (
    ID_FIELDS,
    LOGPROB_FIELDS,
    Decoder,
    Episode,
    EpisodeSpan,
    RolloutStatus,
    TrainingRow,
    as_episode_spans,
    build_episode,
    json_kind,
)
from veri.core.rollout_record import VerifierRecord
from veri.core.rules import Effect, Rule, Verdict
from veri.core.token_account import sampled_tokens, token_account

# Keys only a span has: a list of objects with one of these and no `spans` is a bare list of spans.
_SPAN_KEYS = {"prompt_token_ids", "completion_token_ids", "completion_logprobs"}


@dataclass(frozen=True)
class RecordEntry:
    """One record of a file: its 1-based number, and the record or what is wrong with it."""

    number: int
    record: dict[str, Any] | None
    problem: str = ""


def records_in(path: Path) -> Iterator[RecordEntry]:
    """Every record in a .jsonl file (one per line) or a .json file (a record, a list of records, or spans).

    Raises OSError / UnicodeDecodeError only when the file itself cannot be read.
    """
    text = path.read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if line.strip()]
    if path.suffix != ".jsonl":
        try:
            loaded = json.loads(text)
        except ValueError as error:
            if len(lines) < 2:
                yield RecordEntry(1, None, f"not valid JSON, perhaps cut short ({error})")
                return
            # JSON lines under another name: read it line by line
        else:
            yield from _entries(loaded if isinstance(loaded, list) else [loaded])
            return
    items: list[Any] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            items.append(json.loads(line))
        except ValueError as error:
            items.append(_Unreadable(f"line {number} is not valid JSON, perhaps cut short ({error})"))
    yield from _entries(items)


def read_records(path: Path) -> list[dict[str, Any]]:
    """The records of a file; ValueError naming the first one that cannot be walked."""
    records = []
    for entry in records_in(path):
        if entry.record is None:
            raise ValueError(f"{path}: record {entry.number}: {entry.problem}")
        records.append(entry.record)
    return records


@dataclass(frozen=True)
class _Unreadable:
    problem: str


def _entries(items: list[Any]) -> Iterator[RecordEntry]:
    if items and all(isinstance(item, dict) and "spans" not in item for item in items) and any(
        _SPAN_KEYS & item.keys() for item in items
    ):
        yield RecordEntry(1, {"spans": items})  # a bare list of spans: one rollout
        return
    for number, item in enumerate(items, 1):
        yield _entry(number, item)


def _entry(number: int, item: Any) -> RecordEntry:
    if isinstance(item, _Unreadable):
        return RecordEntry(number, None, item.problem)
    if not isinstance(item, dict):
        return RecordEntry(number, None, f"{json_kind(item)}, not a rollout record (an object with a `spans` list)")
    spans = item.get("spans")
    if not isinstance(spans, list):
        what = "has no `spans` list" if "spans" not in item else f"its `spans` is {json_kind(spans)}, not a list"
        return RecordEntry(number, None, f"{what} (veri debug reads rollout records, or a list of spans)")
    return RecordEntry(number, item)


def explain(record: dict[str, Any], decoder: Decoder | None = None) -> str:
    """The rules walked over one record: a line per span, every verdict with its fix, the result.

    ValueError (one line) when the record's status is not one veri knows.
    """
    status = _status(record.get("status"))
    spans = as_episode_spans(record["spans"])
    decoder = _SafeDecoder(decoder) if decoder is not None else None
    verifier = _recorded_verifier(record)
    episode = build_episode(spans, status, exit_code=record.get("exit_code"), decoder=decoder,
                            verifier=verifier.result() if verifier is not None else None)
    verdicts = [*episode.verdicts, *_recorded_trainer_verdicts(record), *_recorded_reward_verdicts(record)]
    lines = [_header(record, status)]
    if verifier is not None:  # a Harbor task's tests
        lines.append(f"  {verifier.line()}")
    dropped = _hosted_tools_by_span(record["spans"])
    for span in spans:
        lines.append(_span_line(span, episode))
        lines += [f"      {v.rule}: {v.message}" for v in verdicts if v.span == span.request_index]
        lines += _span_notes(span)
        if span.request_index in dropped:
            lines.append(f"      hosted tools dropped from the prompt: {', '.join(dropped[span.request_index])}")
    lines += [f"  {v.rule}: {v.message}" for v in verdicts if v.span is None]
    rules = {v.rule: v for v in verdicts}
    if rules:
        lines.append("what to do:")
        lines += [f"  {rule} ({v.effect}): {v.fix}" for rule, v in rules.items()]
    lines += _result(episode, verdicts, spans)
    if hosted := hosted_tools_line(record["spans"]):
        lines.append(hosted)
    if failures := sum(len(span.tool_call_failures) for span in spans):
        lines.append(f"tool-call parse failures: {failures} ({_failure_kinds(spans)}): the harness got"
                     " the written text instead of a call; a rising count in the step metrics"
                     " (tool_calls/parse_failure_rate) is the policy's tool use degrading")
    return "\n".join(lines)


def _status(value: Any) -> RolloutStatus:
    if value is None:
        return RolloutStatus.COMPLETED  # a foreign record without one: judge the spans alone
    try:
        return RolloutStatus(value)
    except ValueError:
        known = ", ".join(status.value for status in RolloutStatus)
        raise ValueError(f"unknown status {value!r} (veri's are {known})") from None


def _header(record: dict[str, Any], status: RolloutStatus) -> str:
    parts = [f"rollout {record.get('rollout_id', '?')}"]
    if record.get("task_index") is not None:
        parts.append(f"task {record['task_index']} #{record.get('rollout_index', '?')}")
    if record.get("policy_step") is not None:
        parts.append(f"policy step {record['policy_step']}")
    if record.get("staleness") is not None:
        parts.append(f"staleness {record['staleness']}")
    parts.append(f"status {status}")
    reward = record.get("reward")
    if isinstance(reward, dict) and _is_number(reward.get("reward")):
        parts.append(f"reward {reward['reward']:g}")
    return "  ".join(parts)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _span_line(span: EpisodeSpan, episode: Episode) -> str:
    label = span.prompt_source or "?"
    if span.bridged_from is not None:
        label += f" from {span.bridged_from}"
    version = f" v{span.policy_version}" if span.policy_version is not None else ""
    head = (f"  span {span.request_index}  {label}  prompt {len(span.prompt_token_ids)} + completion"
            f" {len(span.completion_token_ids)} tokens{version}")
    if span.request_index in episode.chain:
        position = episode.chain.index(span.request_index)
        return f"{head}  -> in row ({position + 1}/{len(episode.chain)})"
    for number, branch in enumerate(episode.branches, start=2):
        if span.request_index in branch.spans:
            position = branch.spans.index(span.request_index)
            return f"{head}  -> in row {number}, {branch.kind} ({position + 1}/{len(branch.spans)})"
    return f"{head}  -> not in row"


def _span_notes(span: EpisodeSpan) -> list[str]:
    """What a span line does not show: fields read as defaults, tool calls not parsed, client retries."""
    judged = {*ID_FIELDS, *LOGPROB_FIELDS}  # these already gave a verdict
    notes = [f"      note: {why} (ignored)" for field, why in span.unreadable.items() if field not in judged]
    for failure in span.tool_call_failures:
        name = f" {failure['name']!r}" if failure.get("name") else ""
        raw = str(failure.get("raw", ""))
        excerpt = raw[:60] + ("..." if len(raw) > 60 else "")
        notes.append(f"      tool call not parsed: {failure.get('kind', '?')}{name}: {excerpt!r}"
                     f" (sent to the harness as {failure.get('sent_as', 'text')})")
    if span.retried_at:
        notes.append(f"      client retries: {len(span.retried_at)} (the same request re-sent, answered from this"
                     " span: no second sample)")
    return notes


def hosted_tools_line(spans: list[Any]) -> str:
    """One line on the hosted tools the proxy left out of these spans' prompts ('' when none): which,
    in how many spans, and what to do. `spans`: veri `Span`s or span dicts (veri debug, run-harness)."""
    counts: dict[str, int] = {}
    for tools in _hosted_tools_by_span(spans).values():
        for tool in tools:
            counts[tool] = counts.get(tool, 0) + 1
    if not counts:
        return ""
    named = ", ".join(f"{tool} ({count} of {len(spans)} spans)" for tool, count in sorted(counts.items()))
    return (f"hosted tools dropped from the prompt: {named}: the policy cannot run them, so it never saw them"
            " (hosted_tools: drop). Turn them off in the harness to stop sending them (Codex: web_search ="
            ' "disabled"), or set hosted_tools: refuse in the job config to make such calls fail with 400')


def _hosted_tools_by_span(spans: list[Any]) -> dict[int, list[str]]:
    """request_index (else its place in the list) -> the hosted tools dropped from that span's prompt."""
    found = {}
    for position, span in enumerate(spans):
        data = span.model_dump() if isinstance(span, BaseModel) else span
        if not isinstance(data, dict):
            continue
        tools = data.get("hosted_tools_dropped")
        index = data.get("request_index")
        if isinstance(tools, list) and tools:
            found[index if isinstance(index, int) else position] = [str(tool) for tool in tools]
    return found


def _failure_kinds(spans: list[EpisodeSpan]) -> str:
    kinds: dict[str, int] = {}
    for failure in (failure for span in spans for failure in span.tool_call_failures):
        kind = str(failure.get("kind", "?"))
        kinds[kind] = kinds.get(kind, 0) + 1
    return ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items()))


def _result(episode: Episode, verdicts: list[Verdict], spans: list[EpisodeSpan]) -> list[str]:
    """The outcome, each row (the final answer's first, then the branches with how they began), the tokens."""
    rejecting = sorted({str(v.rule) for v in verdicts if v.effect == Effect.REJECT})
    masking = sorted({str(v.rule) for v in verdicts if v.effect == Effect.MASK})
    trainable = not rejecting and not masking and episode.row is not None
    account = token_account(episode, {s.request_index: sampled_tokens(s.completion_token_ids) for s in spans},
                            verdicts, trainable=trainable).line()
    if masking and not rejecting and episode.row is not None:
        return [f"result: MASKED ({', '.join(masking)}): out of the loss, its reward still in its group's baseline",
                account]
    if not trainable:
        return [f"result: REJECTED ({', '.join(rejecting) or 'no trainable chain'}): masked out of the loss", account]
    rows = episode.rows
    degraded = sorted({str(v.rule) for v in verdicts if v.effect == Effect.DEGRADE})
    note = f"; degraded by {', '.join(degraded)}" if degraded else ""
    versions = f"; policy versions {episode.policy_versions}" if len(episode.policy_versions) > 1 else ""
    in_rows = len(episode.chain) + sum(len(b.spans) for b in episode.branches)
    if len(rows) == 1:
        return [f"result: TRAINED on {in_rows} of {len(spans)} spans: {_row_sizes(rows[0])}{note}{versions}", account]
    lines = [f"result: TRAINED on {in_rows} of {len(spans)} spans in {len(rows)} row(s){note}{versions}",
             f"  row 1 ({episode.chain_kind}, spans {episode.chain}, ends at the final answer): {_row_sizes(rows[0])};"
             f" {episode.chain_why}"]
    for number, branch in enumerate(episode.branches, start=2):
        if branch.row is not None:
            lines.append(f"  row {number} ({branch.kind}, spans {branch.spans}): {_row_sizes(branch.row)};"
                         f" {branch.why}")
    return [*lines, account]


def _row_sizes(row: TrainingRow) -> str:
    sampled = sum(row.env_mask)
    return (f"prompt {len(row.prompt_ids)} tokens, completion {len(row.completion_ids)} ({sampled} sampled,"
            f" {len(row.completion_ids) - sampled} environment)")


# Rules the trainer's rollout function applies (they need the step, the policy servers, the job's settings),
# so the walk reads them from the record instead of applying them again.
TRAINER_RULES = (Rule.POLICY_VERSION_STALE, Rule.POLICY_SERVER_RESTARTED, Rule.COMPLETION_TRUNCATED)


def _recorded_verifier(record: dict[str, Any]) -> VerifierRecord | None:
    try:
        return VerifierRecord.model_validate(record["verifier"]) if record.get("verifier") else None
    except ValidationError:
        return None  # a foreign record's own shape


def _recorded_trainer_verdicts(record: dict[str, Any]) -> list[Verdict]:
    episode = record.get("episode")
    found = episode.get("verdicts") if isinstance(episode, dict) else None
    verdicts = []
    for item in found if isinstance(found, list) else []:
        try:
            verdict = Verdict.model_validate(item)
        except ValidationError:
            continue  # a foreign record's own shape: nothing veri can explain
        if verdict.rule in TRAINER_RULES:
            verdicts.append(verdict)
    return verdicts


def _recorded_reward_verdicts(record: dict[str, Any]) -> list[Verdict]:
    reward = record.get("reward")
    if not isinstance(reward, dict) or not isinstance(reward.get("verdicts"), list):
        return []
    verdicts = []
    for item in reward["verdicts"]:
        try:
            verdicts.append(Verdict.model_validate(item))
        except ValidationError:
            continue  # a foreign record's own shape: nothing veri can explain
    return verdicts


class _SafeDecoder:
    """A tokenizer that names an id it cannot decode (negative, past the vocabulary) instead of raising."""

    def __init__(self, decoder: Decoder) -> None:
        self._decoder = decoder

    def decode(self, token_ids: list[int]) -> str:
        try:
            return self._decoder.decode(token_ids)
        except (OverflowError, ValueError, TypeError, IndexError, KeyError):
            return f"<ids {token_ids} not in this tokenizer>"
