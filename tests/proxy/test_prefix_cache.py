"""The prompt prefix cache gives the ids a full render gives, for every template veri ships, and
falls back to a full render where a template renders the prefix differently for what follows."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import renderers
from transformers import AutoTokenizer

from veri.services.proxy.prefix_cache import PrefixRenderCache, TextSplit, TokenSplit
from veri.services.proxy.rendering import ChatRendering
from veri.services.proxy.settings import ProxySettings
from veri.tools.models import smollm2

SYSTEM = "You are a coding agent. Follow the repository's conventions. " * 40
TOOLS = [
    {"type": "function", "function": {"name": "read_file", "description": "Read a file",
                                      "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "bash", "description": "Run a shell command",
                                      "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}},
]
CALL = {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}


def first_calls(system) -> list[list[dict]]:
    """First calls of rollouts that share `system`: each a different task, some with history."""
    return [
        [{"role": "system", "content": system}, {"role": "user", "content": "Fix the failing test."}],
        [{"role": "system", "content": system}, {"role": "user", "content": "  leading spaces, 東京 🙂\n\n"}],
        [{"role": "system", "content": system}, {"role": "user", "content": "List the files."},
         {"role": "assistant", "content": "", "tool_calls": [CALL]},
         {"role": "tool", "tool_call_id": "call_1", "content": "README.md"},
         {"role": "user", "content": "Now read the README."}],
        [{"role": "system", "content": system}, {"role": "user", "content": "One."},
         {"role": "assistant", "content": "Done.", "reasoning_content": "easy"},
         {"role": "user", "content": "Two."}],
    ]


def model_folder(src: Path, out: Path, renderer: str, template: str | None = None) -> Path:
    """The tokenizer of `src` with veri's renderer hint (and another chat template)."""
    out.mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (src / name).exists():
            shutil.copy(src / name, out / name)
    if template is not None:
        (out / "chat_template.jinja").write_text(template)
    (out / "veri.json").write_text(json.dumps({"renderer": renderer}))
    return out


@pytest.fixture(scope="module")
def smollm2_tokenizer(tmp_path_factory) -> Path:
    gguf = smollm2.gguf_path()
    folder = tmp_path_factory.mktemp("smollm2-tokenizer")
    AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(folder)
    return folder


def rendering(folder: Path, **settings) -> ChatRendering:
    return ChatRendering(ProxySettings(policy_url="http://127.0.0.1:1", model_dir=folder, **settings))


@pytest.fixture(params=["tiny/qwen3", "tiny/qwen3-no-thinking", "tiny/jinja", "smollm2/jinja"])
def shipped(request, tiny_model, smollm2_tokenizer, tmp_path) -> ChatRendering:
    """Every template the repo supports, through the proxy's own renderer loading."""
    if request.param == "tiny/qwen3":
        return rendering(tiny_model)
    if request.param == "tiny/qwen3-no-thinking":
        return rendering(tiny_model, chat_template_kwargs={"enable_thinking": False})
    if request.param == "tiny/jinja":  # the tiny model's Qwen3 Jinja template, applied by transformers
        return rendering(model_folder(tiny_model, tmp_path / "tiny-jinja", "default"))
    return rendering(model_folder(smollm2_tokenizer, tmp_path / "smollm2", "default"))


@pytest.mark.parametrize("tools", [TOOLS, None], ids=["tools", "no-tools"])
def test_cached_prefix_gives_the_full_render_ids(shipped: ChatRendering, tools) -> None:
    cache = shipped.prefixes
    for system in (SYSTEM, SYSTEM + "  \n", "naïve — 東京\n\nsecond paragraph"):
        for _ in range(2):  # the second round has every prefix cached
            for messages in first_calls(system):
                expected = shipped.renderer.render_ids(messages, tools=tools, add_generation_prompt=True)
                assert cache.render(messages, tools) == expected
    # 3 prefixes x 4 conversations x 2 rounds: the first two calls of a prefix render in full.
    assert (cache.hits, cache.misses) == (18, 6)


def test_tools_are_keyed_exactly(tiny_model) -> None:
    """Same tools, keys in another order: Qwen3 renders them as given, so they are another prefix."""
    qwen3 = rendering(tiny_model)
    reordered = [{"function": tool["function"], "type": tool["type"]} for tool in TOOLS]
    messages = first_calls(SYSTEM)[0]
    for tools in (TOOLS, TOOLS, reordered, reordered, TOOLS, reordered):
        assert qwen3.prefixes.render(messages, tools) == qwen3.renderer.render_ids(
            messages, tools=tools, add_generation_prompt=True)
    assert qwen3.renderer.render_ids(messages, tools=TOOLS) != qwen3.renderer.render_ids(messages, tools=reordered)
    assert qwen3.prefixes.hits == 2


def test_content_parts_render_like_text(tiny_model) -> None:
    qwen3 = rendering(tiny_model)
    system = {"role": "system", "content": [{"type": "text", "text": SYSTEM}, {"type": "text", "text": "Be brief."}]}
    for task in ("a", "b", "c"):
        messages = [system, {"role": "user", "content": [{"type": "text", "text": f"Task {task}"}]}]
        assert qwen3.prefixes.render(messages, TOOLS) == qwen3.renderer.render_ids(
            messages, tools=TOOLS, add_generation_prompt=True)
    assert qwen3.prefixes.hits == 1


# A template that renders its system turn differently once a conversation goes on: the cached
# prefix must not be used for those conversations.
LOOKS_AHEAD = (
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{%- if m.role == 'system' and messages|length > 2 %} (a conversation in progress){%- endif %}"
    "<|im_end|>\n{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)
# A template that renders the system turn alone differently from the same turn with messages after it.
ALONE_DIFFERS = (
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{%- if messages|length == 1 %} (no task yet){%- endif %}<|im_end|>\n"
    "{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)


def test_prefix_rendered_differently_for_later_messages_is_not_used(tiny_model, tmp_path) -> None:
    jinja = rendering(model_folder(tiny_model, tmp_path / "looks-ahead", "default", LOOKS_AHEAD))
    assert isinstance(jinja.prefixes.split, TextSplit)
    short, _, long, _ = first_calls(SYSTEM)
    for messages in (short, short, short):
        assert jinja.prefixes.render(messages, None) == jinja.renderer.render_ids(messages, add_generation_prompt=True)
    assert jinja.prefixes.hits == 1
    full = jinja.renderer.render_ids(long, add_generation_prompt=True)
    assert "(a conversation in progress)" in jinja.decode(full)
    assert jinja.prefixes.render(long, None) == full
    assert jinja.prefixes.hits == 1  # the cached prefix was checked against this render and not used


def test_prefix_that_renders_differently_alone_is_never_cached(tiny_model, tmp_path) -> None:
    jinja = rendering(model_folder(tiny_model, tmp_path / "alone-differs", "default", ALONE_DIFFERS))
    for messages in first_calls(SYSTEM)[:2] * 3:
        assert jinja.prefixes.render(messages, None) == jinja.renderer.render_ids(messages, add_generation_prompt=True)
    assert jinja.prefixes.hits == 0


class LookAheadQwen3(renderers.Qwen3Renderer):
    """A hand-coded renderer whose system block counts the messages after it."""

    def render_ids(self, messages, *, tools=None, add_generation_prompt=False):
        if messages and messages[0]["role"] == "system":
            counted = f"{messages[0]['content']} ({len(messages)} messages)"
            messages = [{**messages[0], "content": counted}, *messages[1:]]
        return super().render_ids(messages, tools=tools, add_generation_prompt=add_generation_prompt)


def test_hand_coded_renderer_that_looks_ahead_is_caught_when_cached(tiny_model) -> None:
    renderer = LookAheadQwen3(AutoTokenizer.from_pretrained(tiny_model))
    cache = PrefixRenderCache(renderer, TokenSplit(renderer), "look-ahead")
    for messages in first_calls(SYSTEM) * 2:
        assert cache.render(messages, TOOLS) == renderer.render_ids(messages, tools=TOOLS, add_generation_prompt=True)
    assert cache.hits == 0


def test_lru_keeps_the_latest_prefixes(tiny_model) -> None:
    qwen3 = rendering(tiny_model)
    cache = PrefixRenderCache(qwen3.renderer, TokenSplit(qwen3.renderer), "qwen3", max_entries=2)
    systems = ["first system", "second system", "third system"]
    for system in systems:
        for messages in first_calls(system)[:2]:
            cache.render(messages, TOOLS)
    assert len(cache) == 2
    cache.render(first_calls(systems[2])[2], TOOLS)
    cache.render(first_calls(systems[0])[2], TOOLS)  # evicted: seen once more before it is cached again
    assert cache.hits == 1


def test_other_conversations_render_in_full(tiny_model) -> None:
    """No system message, or a system message alone: nothing shared to cache."""
    qwen3 = rendering(tiny_model)
    for messages in ([{"role": "user", "content": "hi"}], [{"role": "system", "content": SYSTEM}],
                     [{"role": "system", "content": SYSTEM}, {"role": "system", "content": "more"},
                      {"role": "user", "content": "hi"}]):
        for _ in range(3):
            assert qwen3.prefixes.render(messages, TOOLS) == qwen3.renderer.render_ids(
                messages, tools=TOOLS, add_generation_prompt=True)
    assert (qwen3.prefixes.hits, qwen3.prefixes.misses) == (0, 0)
