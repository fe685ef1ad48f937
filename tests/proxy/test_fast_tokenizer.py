"""The Rust-backed tokenizer the proxy hands to `renderers` gives transformers' exact ids."""

from __future__ import annotations

import renderers
from transformers import AutoTokenizer

from veri.services.proxy.fast_tokenizer import PROBES, RustBackedTokenizer, verify_same_ids

TEXTS = [*PROBES, "", "a", "\n", "<think>\nreasoning\n</think>\n\n<tool_response>\nok\n</tool_response>",
         "x" * 3000, "mixed 😀 emoji and \u200b zero-width"]


def test_same_ids_offsets_and_renders_as_transformers(tiny_model):
    hf = AutoTokenizer.from_pretrained(tiny_model)
    fast = RustBackedTokenizer(hf)
    assert verify_same_ids(fast, hf) is None
    for text in TEXTS:
        assert fast.encode(text) == hf.encode(text, add_special_tokens=False)
        ours = fast(text, return_offsets_mapping=True)
        theirs = hf(text, add_special_tokens=False, return_offsets_mapping=True)
        assert ours["input_ids"] == theirs["input_ids"]
        assert [tuple(o) for o in ours["offset_mapping"]] == [tuple(o) for o in theirs["offset_mapping"]]
    special = ["<|im_end|>", "<tool_call>"]
    assert fast.convert_tokens_to_ids(special) == hf.convert_tokens_to_ids(special)
    conversation = [
        {"role": "system", "content": "sys"}, {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"type": "function", "function": {"name": "w", "arguments": {"c": "P"}}}]},
        {"role": "tool", "content": "sunny"},
    ]
    tools = [{"type": "function", "function": {"name": "w", "description": "d", "parameters": {"type": "object"}}}]
    config = renderers.Qwen3RendererConfig()
    ours, theirs = (renderers.create_renderer(tokenizer, config).render_ids(conversation, tools=tools,
                                                                            add_generation_prompt=True)
                    for tokenizer in (fast, hf))
    assert ours == theirs


def test_short_texts_come_from_the_cache_unchanged_by_what_a_caller_did(tiny_model):
    hf = AutoTokenizer.from_pretrained(tiny_model)
    fast = RustBackedTokenizer(hf)
    header = "<|im_start|>assistant\n"
    first = fast.encode(header)
    first.append(-1)  # a renderer extends the list it got
    assert fast.encode(header) == hf.encode(header, add_special_tokens=False)
    assert fast.encode(header, add_special_tokens=True) == hf.encode(header, add_special_tokens=True)
