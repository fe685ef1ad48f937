"""`renderers`' Tokenizer protocol served straight from the Rust tokenizer inside a transformers
fast tokenizer. Same ids (it *is* the tokenizer AutoTokenizer built, normalizer and pre-tokenizer
included), without transformers' per-call Python overhead, which dominated the proxy's CPU per
bridged call. `verify_same_ids` guards the equivalence at startup.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

PROBES = [
    "Hello, world!  Two  spaces\tand a tab\n\nnew lines",
    '<|im_start|>user\n{"name": "f", "arguments": {"x": 1}}<|im_end|>\n<tool_call>\n</tool_call>',
    "naïve café — 東京 🙂 1234567890 https://example.com/a?b=c&d=e",
    "   leading and trailing   ",
]


SHORT_TEXT = 64  # characters


class RustBackedTokenizer:
    def __init__(self, hf_tokenizer: Any):
        self._hf = hf_tokenizer
        self._rust = hf_tokenizer.backend_tokenizer
        self.name_or_path = hf_tokenizer.name_or_path
        self.unk_token_id = hf_tokenizer.unk_token_id
        self.eos_token_id = hf_tokenizer.eos_token_id
        self.chat_template = hf_tokenizer.chat_template  # part of the prompt prefix cache's key
        # Renderers encode the same few short strings on every call (the assistant header, three times
        # a call, tool-call tags): those are looked up, not tokenized again. Same ids: one tokenizer.
        self._encode_short = lru_cache(maxsize=4096)(self._encode_tuple)

    def encode(self, text: str, add_special_tokens: bool = False, **_: Any) -> list[int]:
        if len(text) <= SHORT_TEXT:
            return list(self._encode_short(text, add_special_tokens))
        return self._rust.encode(text, add_special_tokens=add_special_tokens).ids

    def _encode_tuple(self, text: str, add_special_tokens: bool) -> tuple[int, ...]:
        return tuple(self._rust.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, token_ids: Any, skip_special_tokens: bool = False, **_: Any) -> str:
        return self._rust.decode(list(token_ids), skip_special_tokens=skip_special_tokens)

    def convert_tokens_to_ids(self, tokens: str | list[str]) -> int | None | list[int | None]:
        if isinstance(tokens, str):
            found = self._rust.token_to_id(tokens)
            return self.unk_token_id if found is None else found
        return [self.convert_tokens_to_ids(token) for token in tokens]

    def __call__(self, text: str, add_special_tokens: bool = False, return_offsets_mapping: bool = False,
                 **_: Any) -> dict[str, list]:
        encoding = self._rust.encode(text, add_special_tokens=add_special_tokens)
        result: dict[str, list] = {"input_ids": encoding.ids}
        if return_offsets_mapping:
            result["offset_mapping"] = encoding.offsets
        return result


def verify_same_ids(fast: RustBackedTokenizer, hf_tokenizer: Any) -> str | None:
    """None when both agree on the probes; otherwise what differs."""
    for text in PROBES:
        ours, theirs = fast.encode(text), hf_tokenizer.encode(text, add_special_tokens=False)
        if ours != theirs:
            return f"encode({text!r}) differs"
        if fast.decode(ours) != hf_tokenizer.decode(theirs, skip_special_tokens=False):
            return f"decode of {text!r} differs"
    return None
