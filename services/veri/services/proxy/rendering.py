"""Messages + tools -> prompt token ids, and completion ids -> a parsed reply, via `renderers`.

A call that continues a conversation this rollout already had is *bridged*: the prompt is the
earlier call's exact prompt + completion ids, extended by the renderer with the new turns. The
model then sees, and the trainer trains on, exactly what was sampled. Anything else is a full
render, and the span records why.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import renderers
import structlog
from renderers.configs import config_from_name
from transformers import AutoTokenizer

from veri.core.records import PromptSource
from veri.services.proxy.fast_tokenizer import RustBackedTokenizer, verify_same_ids
from veri.services.proxy.history import ConversationHashes, first_difference
from veri.services.proxy.prefix_cache import PrefixRenderCache, split_for
from veri.services.proxy.settings import ProxySettings
from veri.services.proxy.store import PriorTurn, SharedIds, SpanStore

log = structlog.get_logger("veri.proxy")

MODEL_HINT_FILE = "veri.json"  # written by `veri model ...`: {"renderer": "<renderers name>"}

# Renderers whose bridge reads the previous prompt only from its last stop token on (renderers 0.1.12:
# Qwen3's, in `prompt_ends_in_reasoning`; the turn close is looked for in the completion) and returns
# it unchanged in front: handed that tail, their ids are the same, and copying 8k ids into the lists
# it builds beside them (~0.1 ms a call) is skipped. Exact types: a subclass may read more.
# tests/proxy/test_bridge_tail.py compares both ways.
TAIL_BRIDGE_RENDERERS: tuple[type, ...] = (renderers.Qwen3Renderer,)


@dataclass(frozen=True)
class PromptPlan:
    prompt_ids: list[int]
    source: PromptSource
    reason: str
    bridged_from: int | None
    hashes: ConversationHashes  # of the messages: the span's key extends them with the reply
    shared: SharedIds | None = None  # the ids it has from the span it bridges from (stored by reference)


def resolve_renderer_name(settings: ProxySettings) -> str:
    if settings.renderer != "auto":
        return settings.renderer
    hint = settings.model_dir / MODEL_HINT_FILE
    if hint.exists():
        return json.loads(hint.read_text())["renderer"]
    return "auto"


def load_renderer(settings: ProxySettings) -> tuple[Any, renderers.Renderer]:
    tokenizer = AutoTokenizer.from_pretrained(str(settings.model_dir))
    name = resolve_renderer_name(settings)
    config = config_from_name(name)
    renderer_tokenizer = tokenizer
    if config is not None and name != "default":
        # Hand-coded renderers only need encode/decode/offsets: serve them from Rust directly.
        fast = RustBackedTokenizer(tokenizer)
        mismatch = verify_same_ids(fast, tokenizer)
        if mismatch is None:
            renderer_tokenizer = fast
        else:
            log.warning("rust tokenizer differs from transformers'; using transformers", problem=mismatch)
        if settings.thinking_retention:
            config = type(config)(thinking_retention=settings.thinking_retention)
    renderer = renderers.create_renderer(
        renderer_tokenizer, config, chat_template_kwargs=settings.chat_template_kwargs or None
    )
    return renderer_tokenizer, renderer


class ChatRendering:
    """Owns the tokenizer and renderer of the served model."""

    def __init__(self, settings: ProxySettings):
        self.tokenizer, self.renderer = load_renderer(settings)
        self.stop_token_ids: list[int] = list(self.renderer.get_stop_token_ids())
        # Every rollout opens with the same system prompt and tools: render them once.
        self.prefixes = PrefixRenderCache(
            self.renderer, split_for(self.renderer, self.tokenizer), template_identity(self.renderer, self.tokenizer)
        )

    def plan_prompt(
        self, store: SpanStore, rollout_id: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> PromptPlan:
        """The prompt for this call: bridged from an earlier call when it continues one."""
        hashes = ConversationHashes(tools, messages)
        prior = store.find_prior_turn(rollout_id, hashes.hashes[:-1]) if len(messages) > 1 else None
        if prior is not None:
            new_messages = messages[prior.n_messages :]
            bridged = self.bridge(prior, new_messages, tools)
            if bridged is not None:
                ids, shared = bridged
                return PromptPlan(
                    ids,
                    PromptSource.BRIDGED,
                    f"extends span {prior.request_index} with {len(new_messages)} new message(s)",
                    prior.request_index,
                    hashes,
                    shared,
                )
            reason = f"continues span {prior.request_index} but the renderer cannot bridge these new messages"
        else:
            reason = self._why_not_continued(store, rollout_id, messages)
        return PromptPlan(self.prefixes.render(messages, tools), PromptSource.FULL_RENDER, reason, None, hashes)

    def bridge(self, prior: PriorTurn, new_messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
               ) -> tuple[list[int], SharedIds | None] | None:
        """The prior turn's ids extended by the new messages (None: the renderer cannot), and how many of
        them are its prompt + completion ids."""
        cut = self._tail_start(prior.prompt_ids)
        tail = PriorTurn(prior.request_index, prior.n_messages, prior.prompt_ids[cut:], prior.completion_ids)
        bridged = self.renderer.bridge_to_next_turn(tail.prompt_ids, tail.completion_ids, new_messages, tools=tools)
        if bridged is None:
            return None
        extended = list(bridged.token_ids)
        shared = shared_ids(tail, extended)
        if shared is not None:
            shared = SharedIds(shared.request_index, cut + shared.count)
        return [*prior.prompt_ids[:cut], *extended] if cut else extended, shared

    def _tail_start(self, prompt_ids: list[int]) -> int:
        """Where the tail a bridge needs begins: the last stop token (0: the whole prompt)."""
        if type(self.renderer) not in TAIL_BRIDGE_RENDERERS:
            return 0
        stops = set(self.stop_token_ids)
        return next((i for i in range(len(prompt_ids) - 1, -1, -1) if prompt_ids[i] in stops), 0)

    @staticmethod
    def _why_not_continued(store: SpanStore, rollout_id: str, messages: list[dict[str, Any]]) -> str:
        latest = store.latest_span_messages(rollout_id)
        if latest is None:
            return "first call of this rollout"
        index, earlier = latest
        return f"history rewritten: does not extend span {index}: {first_difference(earlier, messages)}"

    def parse(self, completion_ids: list[int], tools: list[dict[str, Any]] | None, prompt_ids: list[int]):
        return self.renderer.parse_response(completion_ids, tools=tools, prompt_ids=prompt_ids)

    def count_tokens(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
        return len(self.prefixes.render(messages, tools))

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)


def shared_ids(prior: PriorTurn, ids: list[int]) -> SharedIds | None:
    """How many of `ids` are the prior turn's prompt + completion ids: all of them, or (the renderer cut
    the completion at its turn's close) its prompt. Compared, never assumed."""
    prompt, completion = prior.prompt_ids, prior.completion_ids
    if ids[: len(prompt)] != prompt:
        return None
    whole = len(prompt) + len(completion)
    shared = whole if ids[len(prompt) : whole] == completion else len(prompt)
    return SharedIds(prior.request_index, shared)


def template_identity(renderer: Any, tokenizer: Any) -> str:
    """What decides how a conversation renders: the renderer, its settings and the chat template."""
    return "\n".join([type(renderer).__qualname__, renderer.config.model_dump_json(),
                      str(tokenizer.chat_template)])


def model_name(settings: ProxySettings) -> str:
    return settings.served_model_name or Path(settings.model_dir).name


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "chat_template.json",
                    "special_tokens_map.json", "veri.json")


def model_fingerprint(model_dir: Path) -> str:
    """sha256 over the files that decide rendering (tokenizer, chat template, veri's renderer hint)."""
    digest = hashlib.sha256()
    for name in _TOKENIZER_FILES:
        path = model_dir / name
        if path.is_file():
            digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()
