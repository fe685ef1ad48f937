"""Recognising a continued conversation (canonical messages and prefix hashes) and a re-sent request.

A call *continues* an earlier call of the same rollout when its messages start with that call's
messages followed by the reply the proxy returned (as the client echoes it back). Clients echo
replies in their own shapes (OpenAI SDK objects, Anthropic content blocks, whitespace trimmed,
arguments re-serialised), so messages are compared in a canonical form that keeps exactly what
the chat template renders and drops what it does not (ids, cache hints, reasoning the client
may or may not send back — the sampled reasoning is kept verbatim in the bridged ids anyway).

A *retry* is the same request sent again and marked so by the client (an SDK's retry after its timeout,
a dropped connection or a 5xx carries `x-stainless-retry-count` >= 1; an idempotency key): same route,
same body. `request_key` identifies one; the capture path answers a retry from the earlier call's
span instead of sampling a second, different continuation. An unmarked resend is a new call.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from cachetools import FIFOCache

from veri.services.proxy.long_texts import LongTexts


def content_text(content: Any) -> str:
    """Text of a message's content: a string, or the text parts of a list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict) and part.get("type") == "text")


def _arguments(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def canonical_message(message: dict[str, Any]) -> dict[str, Any]:
    canonical: dict[str, Any] = {"role": message["role"], "content": content_text(message.get("content")).strip()}
    calls = message.get("tool_calls") or []
    if calls:
        canonical["tool_calls"] = [
            {"name": function.get("name"), "arguments": _arguments(function.get("arguments"))}
            for function in (call.get("function") or call for call in calls)
        ]
    return canonical


def prefix_hashes(tools: list[dict[str, Any]] | None, messages: list[dict[str, Any]]) -> list[str]:
    """hashes[k-1] identifies (tools, messages[:k]) for k = 1..len(messages)."""
    return ConversationHashes(tools, messages).hashes


class ConversationHashes:
    """`prefix_hashes` of a conversation, which the hash of the conversation + one more message extends
    without hashing the conversation again (a call's span is keyed by its messages + the reply)."""

    def __init__(self, tools: list[dict[str, Any]] | None, messages: list[dict[str, Any]]):
        tools_json = orjson.dumps(tools or [], option=orjson.OPT_SORT_KEYS)
        self.hashes: list[str] = []
        rest = messages
        if messages:  # every rollout opens with the same system prompt and tools: that digest is kept
            first = orjson.dumps(canonical_message(messages[0]), option=orjson.OPT_SORT_KEYS)
            opening = _OPENINGS.get((tools_json, first))
            if opening is None:
                opening = hashlib.blake2b(tools_json, digest_size=16)
                opening.update(first)
                _remember_opening((tools_json, first), opening)
            self._digest = opening.copy()
            self.hashes.append(opening.hexdigest())
            rest = messages[1:]
        else:
            self._digest = hashlib.blake2b(tools_json, digest_size=16)
        for message in rest:
            self._digest.update(orjson.dumps(canonical_message(message), option=orjson.OPT_SORT_KEYS))
            self.hashes.append(self._digest.copy().hexdigest())

    def with_message(self, message: dict[str, Any]) -> str:
        digest = self._digest.copy()
        digest.update(orjson.dumps(canonical_message(message), option=orjson.OPT_SORT_KEYS))
        return digest.hexdigest()


# (tools, first message) as hashed -> the digest after them; the same opening hashed once per worker.
_KEPT_OPENINGS = 16
_OPENINGS: FIFOCache[tuple[bytes, bytes], Any] = FIFOCache(maxsize=_KEPT_OPENINGS)  # the oldest goes first


def _remember_opening(key: tuple[bytes, bytes], digest: Any) -> None:
    _OPENINGS[key] = digest


def first_difference(earlier: list[dict[str, Any]], later: list[dict[str, Any]]) -> str:
    """Human explanation of where `later` stops extending `earlier`."""
    for index, (old, new) in enumerate(zip(earlier, later, strict=False)):
        old_c, new_c = canonical_message(old), canonical_message(new)
        if old_c != new_c:
            keys = [key for key in ("role", "content", "tool_calls") if old_c.get(key) != new_c.get(key)]
            return f"message {index} ({old_c['role']}) differs in {', '.join(keys)}"
    if len(later) <= len(earlier):
        return f"the request has {len(later)} messages, fewer than the {len(earlier)} already sampled"
    return "the tools or chat-template settings differ"


# The OpenAI and Anthropic SDKs (Python and TypeScript: Claude Code too) number each try of a call: 0 on the
# first, then 1, 2, ... on the retries they make themselves (after a timeout, a dropped connection, a 408,
# 409, 429 or 5xx). The same request resent with no such mark is a new call: a harness that asks again on
# purpose gets a new sample.
RETRY_COUNT_HEADER = "x-stainless-retry-count"
# A client that names its call: every try of it carries the same key (neither SDK sends one by default).
IDEMPOTENCY_HEADER = "idempotency-key"


@dataclass(frozen=True)
class RequestIdentity:
    """What recognises a client's retry: its route + body (+ its idempotency key), and how the client
    marked it: a retry count, an idempotency key."""

    key: str
    client_retry_count: int | None  # None: the client sent none
    idempotency_key: str | None = None

    @classmethod
    def of(cls, path: str, body: dict[str, Any], headers: Mapping[str, str]) -> RequestIdentity:
        count = headers.get(RETRY_COUNT_HEADER, "")
        named = headers.get(IDEMPOTENCY_HEADER) or None
        key = request_key(path, body)
        if named is not None:
            key = hashlib.blake2b(f"{key}\n{named}".encode(), digest_size=16).hexdigest()
        return cls(key, int(count) if count.isdigit() else None, named)

    @property
    def may_be_retry(self) -> bool:
        """Only what the client marks as a retry is answered from an earlier try: a retry count of 1 or
        more, or an idempotency key (sent again with the same body). Anything else is sampled, even with a
        body it sent before: a harness asking again on purpose must get a new sample, not the old reply."""
        return (self.client_retry_count or 0) >= 1 or self.idempotency_key is not None


def request_key(path: str, body: dict[str, Any]) -> str:
    """Identifies a request by its route and body (keys in any order), so a client's retry matches it.

    Long strings count by their key (`long_texts`: the system prompt resent by every call is not hashed
    again), and where they were is part of it, so a body holding such a key as its text differs."""
    texts = LongTexts()
    short = texts.split(body, [])
    digest = hashlib.blake2b(path.encode(), digest_size=16)
    digest.update(orjson.dumps(short, option=orjson.OPT_SORT_KEYS))
    digest.update(b"\n".join(sorted(orjson.dumps(at) for at in texts.at)))
    return digest.hexdigest()
