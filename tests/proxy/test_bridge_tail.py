"""A bridge handed the previous prompt's tail (from its last stop token) gives the ids the renderer's
bridge gives from the whole prompt, for every kind of turn a rollout has: tool results, user turns,
reasoning closed, left open, or opened in the prompt, a completion cut off before its turn's close."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.proxy.test_prefix_cache import model_folder
from veri.services.proxy.rendering import TAIL_BRIDGE_RENDERERS, ChatRendering
from veri.services.proxy.settings import ProxySettings
from veri.services.proxy.store import PriorTurn

SYSTEM = "You are a coding agent. " * 50
TOOLS = [{"type": "function", "function": {
    "name": "bash", "description": "Run a shell command",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}}]
CALL = '<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call>'
COMPLETIONS = {  # what the policy sampled, as text; "<|im_end|>" closes the turn
    "tool call": CALL + "<|im_end|>",
    "reasoning, then a call": "<think>\nlist first\n</think>\n\n" + CALL + "<|im_end|>",
    "reasoning never closed": "<think>\nstill thinking",
    "answer cut off": "The files are",
    "plain answer": "Done.<|im_end|>",
}
NEW_TURNS = {
    "a tool result": [{"role": "tool", "tool_call_id": "call_1", "content": "README.md"}],
    "a user turn": [{"role": "user", "content": "Now read it."}],
    "a tool result and a user turn": [{"role": "tool", "tool_call_id": "call_1", "content": "a\nb"},
                                      {"role": "user", "content": "And then?"}],
}


@pytest.fixture(scope="module", params=[{}, {"enable_thinking": False}], ids=["thinking", "no thinking"])
def rendering(request, tiny_model: Path, tmp_path_factory) -> ChatRendering:
    folder = model_folder(tiny_model, tmp_path_factory.mktemp("qwen3") / "model", "qwen3")
    rendering = ChatRendering(ProxySettings(policy_url="http://policy", model_dir=folder,
                                            chat_template_kwargs=request.param))
    assert type(rendering.renderer) in TAIL_BRIDGE_RENDERERS
    return rendering


def prior_turn(rendering: ChatRendering, completion: str, turns: int) -> PriorTurn:
    """A rollout's `turns`-th call: its prompt rendered, its completion as sampled."""
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "List the files."}]
    for turn in range(turns - 1):
        messages += [{"role": "assistant", "content": "", "tool_calls": [
            {"id": f"call_{turn}", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}]},
            {"role": "tool", "tool_call_id": f"call_{turn}", "content": f"file{turn}"}]
    prompt = list(rendering.renderer.render_ids(messages, tools=TOOLS, add_generation_prompt=True))
    return PriorTurn(turns - 1, len(messages) + 1, prompt, rendering.encode(completion))


@pytest.mark.parametrize("completion", COMPLETIONS)
@pytest.mark.parametrize("new", NEW_TURNS)
@pytest.mark.parametrize("turns", [1, 3])
def test_the_tail_bridge_gives_the_whole_prompts_ids(rendering: ChatRendering, completion: str, new: str,
                                                     turns: int):
    prior = prior_turn(rendering, COMPLETIONS[completion], turns)
    whole = rendering.renderer.bridge_to_next_turn(prior.prompt_ids, prior.completion_ids, NEW_TURNS[new],
                                                   tools=TOOLS)
    bridged = rendering.bridge(prior, NEW_TURNS[new], TOOLS)
    if whole is None:
        assert bridged is None
        return
    assert bridged is not None
    ids, shared = bridged
    assert ids == list(whole.token_ids)
    assert shared is not None and shared.request_index == prior.request_index
    joined = prior.prompt_ids + prior.completion_ids
    assert ids[: shared.count] == joined[: shared.count] and shared.count >= len(prior.prompt_ids)
    assert rendering._tail_start(prior.prompt_ids) > 0  # the tail was a tail
