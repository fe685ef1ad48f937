"""The tiny test model: reproducible bytes, a tokenizer transformers and `tokenizers` agree on, and a
Qwen3 chat template that the `renderers` Qwen3 renderer reproduces token for token."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import renderers
import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM, AutoTokenizer

from veri.tools.models.tiny import build_tiny_model

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "fetch_url",
            "description": "Fetch a web page and return its text.",
            "parameters": {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]},
        },
    },
    {
        "type": "function",
        "function": {"name": "search", "description": "Search the web — résumé café 東京.", "parameters": {}},
    },
]
CALL = {
    "type": "function",
    "id": "c1",
    "function": {"name": "fetch_url", "arguments": {"url": "https://example.com/a?b=1"}},
}
CALL_STR_ARGS = {"type": "function", "id": "c2", "function": {"name": "search", "arguments": '{"q": "weather"}'}}

SYSTEM_USER = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Extract the URLs."}]
TOOL_LOOP = [
    {"role": "system", "content": "You extract links."},
    {"role": "user", "content": "Links on https://example.com please."},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": '<a href="/x">x</a>'},
    {"role": "assistant", "content": "Also searching.", "tool_calls": [CALL, CALL_STR_ARGS]},
    {"role": "tool", "tool_call_id": "c1", "content": "page two"},
    {"role": "tool", "tool_call_id": "c2", "content": '{"results": []}'},
]
REASONING = [
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4", "reasoning_content": "Add them."},
    {"role": "user", "content": "And 3+3?"},
    {"role": "assistant", "content": "6", "reasoning_content": "\nAdd again.\n"},
]
INLINE_THINK = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "<think>\nGreet back.\n</think>\n\nHello!"},
]

# (messages, tools, add_generation_prompt)
CASES = {
    "system_user_prompt": (SYSTEM_USER, None, True),
    "system_user": (SYSTEM_USER, None, False),
    "user_with_tools": (SYSTEM_USER[1:], TOOLS, True),
    "system_with_tools": (SYSTEM_USER, TOOLS, True),
    "tool_loop_prompt": (TOOL_LOOP, TOOLS, True),
    "tool_loop_final_answer": (TOOL_LOOP + [{"role": "assistant", "content": "Found /x."}], TOOLS, False),
    "reasoning_content": (REASONING, None, False),
    "reasoning_then_prompt": (REASONING + [{"role": "user", "content": "Thanks"}], None, True),
    "inline_think": (INLINE_THINK, None, False),
}
ENCODE_SAMPLES = [
    "Hello, world! It's a test; we'll see.",
    "  leading and   internal   spaces   \t\ttabs\n\n\nnewlines\r\n",
    "numbers 1234567890 3.14159 -42 1e10 0x1F",
    "unicode: café naïve Ελλάδα Москва 東京 서울 😀🚀 e\u0301 (combining) ½",
    '{"name": "fetch_url", "arguments": {"url": "https://example.com/a?b=1&c=%20"}}',
    '<div class="x"><a href="/docs/index.html">docs</a></div>',
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n{}\n</tool_call>",
    "<tool_response>\nok\n</tool_response><|endoftext|>",
    "def f(x):\n    return x ** 2  # square\n",
    "",
]


@pytest.fixture(scope="module")
def tokenizer(tiny_model: Path):
    return AutoTokenizer.from_pretrained(tiny_model)


def test_build_is_byte_identical(tmp_path: Path) -> None:
    first, second = build_tiny_model(tmp_path / "a"), build_tiny_model(tmp_path / "b")
    names = sorted(p.name for p in first.iterdir())
    assert names == sorted(p.name for p in second.iterdir())
    assert {"config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja", "veri.json"} <= set(names)
    for name in names:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_folder_is_small_and_hints_the_qwen3_renderer(tiny_model: Path) -> None:
    assert json.loads((tiny_model / "veri.json").read_text()) == {"renderer": "qwen3"}
    assert sum(p.stat().st_size for p in tiny_model.iterdir()) < 5_000_000


def test_auto_tokenizer_matches_raw_tokenizers(tiny_model: Path, tokenizer) -> None:
    raw = Tokenizer.from_file(str(tiny_model / "tokenizer.json"))
    assert type(tokenizer).__name__ == "Qwen2Tokenizer"
    for text in ENCODE_SAMPLES:
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert ids == raw.encode(text, add_special_tokens=False).ids, text
        assert ids == raw.encode(text).ids, text  # no BOS/EOS added, as in Qwen3
        assert tokenizer.decode(ids) == raw.decode(ids, skip_special_tokens=False)


def test_special_tokens_follow_qwen3(tokenizer) -> None:
    assert 4000 <= len(tokenizer) <= 8000
    added = {tok.content: tok for tok in tokenizer.added_tokens_decoder.values()}
    for token in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]:
        assert added[token].special, token
    for token in ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]:
        assert not added[token].special, token
    for token in added:
        assert tokenizer.encode(token, add_special_tokens=False) == [tokenizer.convert_tokens_to_ids(token)]
    assert (tokenizer.eos_token, tokenizer.pad_token, tokenizer.bos_token) == ("<|im_end|>", "<|endoftext|>", None)
    # A decode that skips special tokens keeps the tool markup the parsers look for.
    ids = tokenizer.encode("<|im_start|><tool_call>x</tool_call><|im_end|>", add_special_tokens=False)
    assert tokenizer.decode(ids, skip_special_tokens=True) == "<tool_call>x</tool_call>"


@pytest.mark.parametrize("case", sorted(CASES))
def test_renderer_matches_chat_template(tokenizer, case: str) -> None:
    messages, tools, add_generation_prompt = CASES[case]
    renderer = renderers.create_renderer(tokenizer, renderers.Qwen3RendererConfig())
    expected = tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=True, return_dict=False
    )
    assert renderer.render_ids(messages, tools=tools, add_generation_prompt=add_generation_prompt) == expected


@pytest.mark.parametrize("how", ["config", "chat_template_kwargs"])
@pytest.mark.parametrize("tools", [None, TOOLS])
def test_renderer_matches_chat_template_without_thinking(tokenizer, how: str, tools) -> None:
    if how == "config":
        renderer = renderers.create_renderer(tokenizer, renderers.Qwen3RendererConfig(enable_thinking=False))
    else:
        renderer = renderers.create_renderer(
            tokenizer, renderers.Qwen3RendererConfig(), chat_template_kwargs={"enable_thinking": False}
        )
    expected = tokenizer.apply_chat_template(
        SYSTEM_USER, tools=tools, add_generation_prompt=True, enable_thinking=False, tokenize=True, return_dict=False
    )
    assert renderer.render_ids(SYSTEM_USER, tools=tools, add_generation_prompt=True) == expected
    assert tokenizer.decode(expected).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_renderer_parses_a_tool_call(tokenizer) -> None:
    renderer = renderers.create_renderer(tokenizer, renderers.Qwen3RendererConfig())
    completion = '<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call><|im_end|>'
    parsed = renderer.parse_response(tokenizer.encode(completion, add_special_tokens=False))
    assert [(call.name, call.arguments) for call in parsed.tool_calls] == [("f", {"x": 1})]
    assert parsed.content == ""


def test_model_takes_a_12k_token_prompt(tiny_model: Path, tokenizer) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    assert model.config.max_position_embeddings >= 32768
    assert model.config.vocab_size == len(tokenizer)
    assert model.dtype == torch.float32
    input_ids = torch.randint(0, len(tokenizer), (1, 12_000), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(input_ids=input_ids).logits
    assert logits.shape == (1, 12_000, len(tokenizer))
    assert torch.isfinite(logits).all()
