"""What changed between a recording and its replay, in lines a person reads.

Compared: each request's answer status; each span's fields except those that differ on every run
(rollout id, times, replica, cached-token counts, the response's timestamps; of `retried_at`, only
how many), with the replay's
made-up ids mapped back to the recorded ones; the episode (chain, training row, env_mask, verdicts);
the reward. Lists of numbers (ids, masks, logprobs) name their first differing position, token ids
with their text and the text before.
"""

from __future__ import annotations

from typing import Any

import orjson

from veri.core.episodes import Decoder
from veri.core.records import Span
from veri.tools.replay.recording import Recording
from veri.tools.replay.runner import Replay

VARIES_PER_RUN = {"rollout_id", "started_at", "duration_s", "replica", "cached_prompt_tokens"}
RESPONSE_TIMES = ("created", "created_at", "completed_at")  # chat's, the Responses API's
TOKEN_IDS = {"prompt_token_ids", "completion_token_ids", "prompt_ids", "completion_ids"}  # decoded when shown
MAX_PER_FIELD = 3
MAX_VALUE_CHARS = 160


def differences(recording: Recording, replay: Replay, decoder: Decoder | None = None) -> list[str]:
    found: list[str] = []
    for request in recording.requests:
        status = replay.statuses.get(request.seq)
        if request.status != status:
            found.append(f"request {request.seq} ({request.method} {request.path}): answered {status},"
                         f" recorded {request.status}")
    if len(replay.spans) != len(recording.spans):
        found.append(f"spans: the replay made {len(replay.spans)}, the recording has {len(recording.spans)}")
    back = {replayed: recorded for recorded, replayed in replay.id_map.items()}
    for recorded, replayed in zip(recording.spans, replay.spans, strict=False):
        found += _compare(f"span {recorded.request_index}", _comparable(recorded, {}),
                          _comparable(replayed, back), decoder)
    found += _compare("episode", recording.episode.model_dump(mode="json"), replay.episode.model_dump(mode="json"),
                      decoder)
    if recording.reward is not None or replay.reward is not None:
        recorded_reward = recording.reward.model_dump(mode="json") if recording.reward else None
        replayed_reward = replay.reward.model_dump(mode="json") if replay.reward else None
        found += _compare("reward", recorded_reward, replayed_reward, decoder)
    return found


def _comparable(span: Span, rename: dict[str, str]) -> Any:
    text = orjson.dumps(span.model_dump(mode="json", exclude=VARIES_PER_RUN)).decode()
    for replayed, recorded in rename.items():
        text = text.replace(replayed, recorded)
    value = orjson.loads(text)
    for stamp in RESPONSE_TIMES:
        value["response"].pop(stamp, None)
    value["retried_at"] = len(value["retried_at"])  # the client's retries answered from the span, not when
    return value


def _compare(where: str, recorded: Any, replayed: Any, decoder: Decoder | None) -> list[str]:
    found: list[str] = []
    _walk(where, recorded, replayed, decoder, found)
    return found


def _walk(where: str, recorded: Any, replayed: Any, decoder: Decoder | None, found: list[str]) -> None:
    if recorded == replayed:
        return
    field = where.rsplit(".", 1)[-1]
    if _numbers(recorded) and _numbers(replayed):  # token ids, masks, logprobs: where they part
        found.append(f"{where}: {_tokens(recorded, replayed, decoder if field in TOKEN_IDS else None)}")
        return
    if isinstance(recorded, dict) and isinstance(replayed, dict):
        for key in list(recorded) + [key for key in replayed if key not in recorded]:
            if key not in replayed:
                found.append(f"{where}.{key}: missing in the replay (recorded {_short(recorded[key])})")
            elif key not in recorded:
                found.append(f"{where}.{key}: new in the replay ({_short(replayed[key])})")
            else:
                _walk(f"{where}.{key}", recorded[key], replayed[key], decoder, found)
        return
    if isinstance(recorded, list) and isinstance(replayed, list) and len(recorded) == len(replayed):
        before = len(found)
        for index, (old, new) in enumerate(zip(recorded, replayed, strict=True)):
            _walk(f"{where}[{index}]", old, new, decoder, found)
            if len(found) - before >= MAX_PER_FIELD:
                found.append(f"{where}: (more differences not shown)")
                return
        return
    found.append(f"{where}: recorded {_short(recorded)}, replayed {_short(replayed)}")


def _numbers(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(
        isinstance(item, int | float) and not isinstance(item, bool) for item in value)


def _tokens(recorded: list, replayed: list, decoder: Decoder | None) -> str:
    limit = min(len(recorded), len(replayed))
    position = next((i for i in range(limit) if recorded[i] != replayed[i]), limit)
    text = f"first difference at position {position} (recorded {len(recorded)} tokens, replayed {len(replayed)})"
    old = recorded[position] if position < len(recorded) else None
    new = replayed[position] if position < len(replayed) else None
    if decoder is None:
        return f"{text}: recorded {old}, replayed {new}"

    def shown(token: int | None) -> str:
        return "(end)" if token is None else f"{token} {decoder.decode([token])!r}"
    context = decoder.decode(recorded[max(0, position - 12):position])
    return f"{text}: recorded {shown(old)}, replayed {shown(new)}, after {context!r}"


def _short(value: Any) -> str:
    text = orjson.dumps(value).decode() if not isinstance(value, str) else repr(value)
    return text if len(text) <= MAX_VALUE_CHARS else f"{text[:MAX_VALUE_CHARS]}..."
