"""A span's long strings, kept once in the span store instead of in every span that carries them.

Every call of a rollout resends the whole conversation, and every rollout of a job opens with the
same system prompt and tools: a span holding them verbatim (in the client's request and again in
the rendered messages) wrote ~50 KB per call at 8k tokens, most of it text the store already had.
`split` swaps each string of at least `LONG_TEXT` characters for its hash and lists where it was;
`join` puts the strings back. Where they were is kept beside the span (not marked inside it), so
no client text can be mistaken for a reference.
"""

from __future__ import annotations

import hashlib
from typing import Any

from cachetools import LRUCache

LONG_TEXT = 1024  # characters: shorter strings cost less to store than to look up

Path = list[str | int]


class TextKeys:
    """The keys of long texts seen lately, by content: every call of every rollout resends the same system
    prompt, and a str's own hash (kept on the object, so each text's copies in one request pay it once)
    costs a fifth of hashing it with blake2b. LRU within `budget` characters."""

    def __init__(self, budget: int = 8_000_000) -> None:
        # text -> (its key, its length): the cache weighs an entry by its value.
        self._keys: LRUCache[str, tuple[str, int]] = LRUCache(maxsize=budget, getsizeof=_text_length)

    def key(self, text: str) -> str:
        known = self._keys.get(text)  # marks it used
        if known is not None:
            return known[0]
        key = hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
        if len(text) <= self._keys.maxsize:  # a text over the budget is hashed each time, never kept
            self._keys[text] = (key, len(text))
        return key


def _text_length(entry: tuple[str, int]) -> int:
    return entry[1]


TEXT_KEYS = TextKeys()  # one per worker process


class LongTexts:
    """The long strings found in one span's values, by hash, and where each was."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}
        self.at: list[Path] = []
        self._hashes: dict[int, str] = {}  # the same string object (request and messages share it) hashed once

    def split(self, value: Any, path: Path) -> Any:
        """`value` with its long strings replaced by their hashes (copied only where one was)."""
        if isinstance(value, str):
            return self._key(value, path) if len(value) >= LONG_TEXT else value
        if isinstance(value, dict):
            copy = None
            for name, item in value.items():
                # Short strings and numbers, most of a span's values, are passed over without a call.
                if isinstance(item, (dict, list)) or (isinstance(item, str) and len(item) >= LONG_TEXT):
                    new = self.split(item, [*path, name])
                    if new is not item:
                        copy = copy if copy is not None else dict(value)
                        copy[name] = new
            return value if copy is None else copy
        if isinstance(value, list):
            copied = None
            for index, item in enumerate(value):
                if isinstance(item, (dict, list)) or (isinstance(item, str) and len(item) >= LONG_TEXT):
                    new = self.split(item, [*path, index])
                    if new is not item:
                        copied = copied if copied is not None else list(value)
                        copied[index] = new
            return value if copied is None else copied
        return value

    def _key(self, value: str, path: Path) -> str:
        key = self._hashes.get(id(value))
        if key is None:
            key = TEXT_KEYS.key(value)
            self._hashes[id(value)] = key
            self.texts[key] = value
        self.at.append(path)
        return key


def hashes_at(fields: dict[str, Any], at: list[Path]) -> list[str]:
    return [_parent(fields, path)[path[-1]] for path in at]


def join(fields: dict[str, Any], at: list[Path], texts: dict[str, str]) -> None:
    """Put the long strings back into a span's JSON fields, in place."""
    for path in at:
        parent = _parent(fields, path)
        parent[path[-1]] = texts[parent[path[-1]]]


def _parent(fields: dict[str, Any], path: Path) -> Any:
    node: Any = fields
    for step in path[:-1]:
        node = node[step]
    return node
