"""The shared opening of a conversation (system prompt + tools), rendered once for every rollout.

A coding agent opens every rollout with the same ~12k tokens of system prompt and tools; only the
task differs. Rendering that prefix is most of a first call's cost, so its ids are kept (LRU, keyed
by the exact system message, the exact tools and the template with its settings) and a new rollout
renders only its own messages behind them.

Cached ids joined to separately rendered messages are only right where the template renders the
prefix the same whatever follows. How that is known depends on the renderer:

- `TextSplit`, a chat template rendered as text (`DefaultRenderer`, e.g. SmolLM2's): every call
  renders the whole conversation as *text* (cheap; tokenizing is what costs) and checks that it
  starts with the cached prefix text. The prefix is cut right after an added token that the
  tokenizer matches on raw text, where tokenizing splits the text anyway, so the ids before the cut
  cannot depend on what follows. A template that renders the prefix differently for some messages
  fails the check on that call, which is then rendered in full.
- `TokenSplit`, a hand-coded renderer known to emit the system block from the first message and
  the tools alone (`renderers`' Qwen3): ids(system + tools) + ids(the other messages) is the render.

A prefix is cached the second time it is seen (a one-off system prompt costs nothing extra); on
that call the joined ids are compared with a full render, and a prefix whose join differs is
remembered as unsplittable and always rendered in full.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
import renderers
import structlog
from cachetools import LRUCache
from renderers.default import _decode_tool_call_arguments

log = structlog.get_logger("veri.proxy")

Messages = list[dict[str, Any]]
Tools = list[dict[str, Any]] | None

# Hand-coded renderers whose system block depends on the first message and the tools only.
TOKEN_SPLIT_RENDERERS: tuple[type, ...] = (renderers.Qwen3Renderer,)


@dataclass(frozen=True)
class CachedPrefix:
    ids: list[int]
    text: str | None = None  # TextSplit: the rendered text these ids encode


class PrefixSplit(Protocol):
    def prefix(self, system: dict[str, Any], tools: Tools) -> CachedPrefix | None:
        """The prefix's ids (None: this template offers no safe place to cut)."""

    def join(self, prefix: CachedPrefix, messages: Messages, tools: Tools) -> list[int] | None:
        """The whole prompt from the cached prefix and messages[1:] (None: not for these messages)."""


class TokenSplit:
    def __init__(self, renderer: Any):
        self.renderer = renderer

    def prefix(self, system: dict[str, Any], tools: Tools) -> CachedPrefix | None:
        return CachedPrefix(list(self.renderer.render_ids([system], tools=tools)))

    def join(self, prefix: CachedPrefix, messages: Messages, tools: Tools) -> list[int] | None:
        rest = self.renderer.render_ids(messages[1:], tools=None, add_generation_prompt=True)
        return [*prefix.ids, *rest]


class TextSplit:
    """The chat template's text, tokenized the way `apply_chat_template(tokenize=True)` does."""

    def __init__(self, tokenizer: Any, template_kwargs: dict[str, Any]):
        self.tokenizer = tokenizer
        self.template_kwargs = template_kwargs
        self.cut_tokens = clean_cut_tokens(tokenizer)

    def prefix(self, system: dict[str, Any], tools: Tools) -> CachedPrefix | None:
        text = self._text([system], tools, add_generation_prompt=False)
        cut = max((text.rfind(token) + len(token) for token in self.cut_tokens if token in text), default=None)
        if cut is None:
            return None
        return CachedPrefix(self._encode(text[:cut]), text[:cut])

    def join(self, prefix: CachedPrefix, messages: Messages, tools: Tools) -> list[int] | None:
        assert prefix.text is not None
        text = self._text(messages, tools, add_generation_prompt=True)
        if not text.startswith(prefix.text):
            return None  # this conversation makes the template render its prefix differently
        return [*prefix.ids, *self._encode(text[len(prefix.text) :])]

    def _text(self, messages: Messages, tools: Tools, *, add_generation_prompt: bool) -> str:
        # Exactly what DefaultRenderer renders (it decodes tool-call arguments first), as text.
        return self.tokenizer.apply_chat_template(
            _decode_tool_call_arguments(messages), tools=tools, add_generation_prompt=add_generation_prompt,
            tokenize=False, **self.template_kwargs,
        )

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []


def clean_cut_tokens(tokenizer: Any) -> list[str]:
    """Added tokens matched on the raw text that no other added token overlaps: tokenizing splits there.

    Not normalized, no lstrip/rstrip/single_word (each makes the match depend on its neighbours), and
    not part of a longer added token (which could match across the cut instead)."""
    added = [token for token in tokenizer.added_tokens_decoder.values() if token.content]
    contents = [token.content for token in added]
    return [
        token.content for token in added
        if not (token.normalized or token.lstrip or token.rstrip or token.single_word)
        and not any(token.content in other for other in contents if other != token.content)
    ]


def split_for(renderer: Any, tokenizer: Any) -> PrefixSplit | None:
    """How prefixes of this renderer may be cached; None: they may not."""
    if isinstance(renderer, renderers.DefaultRenderer):
        return TextSplit(tokenizer, dict(renderer.config.model_extra or {}))
    if isinstance(renderer, TOKEN_SPLIT_RENDERERS):
        return TokenSplit(renderer)
    return None


_UNSPLITTABLE = CachedPrefix([])


class PrefixRenderCache:
    """Prompt ids (with the generation prompt) of conversations that open with a cached prefix."""

    def __init__(self, renderer: Any, split: PrefixSplit | None, template: str, *, max_entries: int = 32):
        self.renderer = renderer
        self.split = split
        self.max_entries = max_entries
        self._template = hashlib.blake2b(template.encode(), digest_size=16).digest()
        # On the request path: a hit's get costs ~0.1 µs more than OrderedDict's get + move_to_end (measured),
        # against the ~2 ms the proxy adds per call (docs/benchmarks.md).
        self._seen: LRUCache[bytes, None] = LRUCache(maxsize=max_entries * 4)  # prefixes seen once, not cached yet
        self._prefixes: LRUCache[bytes, CachedPrefix] = LRUCache(maxsize=max_entries)  # get marks it used
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._prefixes)

    def render(self, messages: Messages, tools: Tools) -> list[int]:
        key = self._key(messages, tools)
        if key is None:
            return self._full(messages, tools)
        prefix = self._prefixes.get(key)
        if prefix is None:
            return self._miss(key, messages, tools)
        if prefix is not _UNSPLITTABLE:
            assert self.split is not None  # there is a key only where there is a split
            joined = self.split.join(prefix, messages, tools)
            if joined is not None:
                self.hits += 1
                return joined
        return self._full(messages, tools)

    def _key(self, messages: Messages, tools: Tools) -> bytes | None:
        """Identifies (template, system message, tools) exactly: key order and whitespace included."""
        # The shape every cached join was checked on: a system message, then the user's.
        if self.split is None or len(messages) < 2 or messages[0].get("role") != "system":
            return None
        if messages[1].get("role") != "user":
            return None
        digest = hashlib.blake2b(self._template, digest_size=16)
        digest.update(orjson.dumps(messages[0]))
        digest.update(orjson.dumps(tools))
        return digest.digest()

    def _miss(self, key: bytes, messages: Messages, tools: Tools) -> list[int]:
        self.misses += 1
        full = self._full(messages, tools)
        if key not in self._seen:
            self._seen[key] = None
            return full
        del self._seen[key]
        assert self.split is not None
        prefix = self.split.prefix(messages[0], tools)
        if prefix is None or self.split.join(prefix, messages, tools) != full:
            log.info("prompt prefix not cached: the chat template renders it differently when messages follow;"
                     " first calls with it are rendered in full")
            prefix = _UNSPLITTABLE
        self._prefixes[key] = prefix
        return full

    def _full(self, messages: Messages, tools: Tools) -> list[int]:
        return list(self.renderer.render_ids(messages, tools=tools, add_generation_prompt=True))

