"""`veri debug`: walk the episode rules over downloaded rollout records and explain each verdict.

Reads veri's own records (archive JSONL lines) or any JSON with a `spans` list using veri's span
field names (prompt_token_ids, completion_token_ids, completion_logprobs, request_index, ...), and
also a bare list of spans, as `veri session spans` prints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from veri.core.episodes import (
    Decoder,
    Effect,
    Episode,
    EpisodeSpan,
    RolloutStatus,
    Verdict,
    as_episode_spans,
    build_episode,
)


def read_records(path: Path) -> list[dict[str, Any]]:
    """The records in a .jsonl file (one per line) or a .json file (a record, a list of records, or spans)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        items = [json.loads(line) for line in text.splitlines() if line.strip()]
    else:
        loaded = json.loads(text)
        items = loaded if isinstance(loaded, list) else [loaded]
    if items and all(isinstance(item, dict) and "spans" not in item and "prompt_token_ids" in item for item in items):
        return [{"spans": items}]  # a bare list of spans: one rollout
    for number, item in enumerate(items, 1):
        if not isinstance(item, dict) or not isinstance(item.get("spans"), list):
            raise ValueError(f"{path}: record {number} has no `spans` list")
    return items


def explain(record: dict[str, Any], decoder: Decoder | None = None) -> str:
    """The rules walked over one record: a line per span, every verdict with its fix, the result."""
    status = _status(record.get("status"))
    spans = as_episode_spans(record["spans"])
    episode = build_episode(spans, status, exit_code=record.get("exit_code"), decoder=decoder)
    verdicts = [*episode.verdicts, *_recorded_reward_verdicts(record)]
    lines = [_header(record, status)]
    for span in spans:
        lines.append(_span_line(span, episode))
        lines += [f"      {v.rule}: {v.message}" for v in verdicts if v.span == span.request_index]
    lines += [f"  {v.rule}: {v.message}" for v in verdicts if v.span is None]
    rules = {v.rule: v for v in verdicts}
    if rules:
        lines.append("what to do:")
        lines += [f"  {rule} ({v.effect}): {v.fix}" for rule, v in rules.items()]
    lines.append(_result(episode, verdicts, len(spans)))
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
    parts.append(f"status {status}")
    reward = record.get("reward")
    if isinstance(reward, dict) and reward.get("reward") is not None:
        parts.append(f"reward {reward['reward']:g}")
    return "  ".join(parts)


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
    return f"{head}  -> not in row"


def _result(episode: Episode, verdicts: list[Verdict], n_spans: int) -> str:
    rejecting = sorted({str(v.rule) for v in verdicts if v.effect == Effect.REJECT})
    if rejecting or episode.row is None:
        return f"result: REJECTED ({', '.join(rejecting) or 'no trainable chain'}): masked out of the loss"
    row = episode.row
    sampled = sum(row.env_mask)
    degraded = sorted({str(v.rule) for v in verdicts if v.effect == Effect.DEGRADE})
    note = f"; degraded by {', '.join(degraded)}" if degraded else ""
    versions = f"; policy versions {episode.policy_versions}" if len(episode.policy_versions) > 1 else ""
    return (f"result: TRAINED on {len(episode.chain)} of {n_spans} spans: prompt {len(row.prompt_ids)} tokens,"
            f" completion {len(row.completion_ids)} ({sampled} sampled, {len(row.completion_ids) - sampled}"
            f" environment){note}{versions}")


def _recorded_reward_verdicts(record: dict[str, Any]) -> list[Verdict]:
    reward = record.get("reward")
    if not isinstance(reward, dict):
        return []
    verdicts = []
    for item in reward.get("verdicts") or []:
        try:
            verdicts.append(Verdict.model_validate(item))
        except ValidationError:
            continue  # a foreign record's own shape: nothing veri can explain
    return verdicts
