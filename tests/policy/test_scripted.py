"""`--scripted-replies` (test-only): teacher-forced replies with the model's own logprobs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from testkit.servers import start_server
from tests.policy.helpers import assert_logprobs_match, complete, greedy_reference

pytestmark = pytest.mark.needs("process")

REPLY = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


@pytest.fixture(scope="module")
def scripted(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    script = tmp_path_factory.mktemp("script") / "script.json"
    script.write_text(json.dumps([{"if_last_user_turn_contains": "weather in Paris", "reply": REPLY}]))
    with start_server(["serve", "policy", "--model", str(tiny_model), "--scripted-replies", str(script)]) as server:
        with httpx.Client(base_url=server.url, timeout=120) as c:
            yield c


def _chat(tokenizer: PreTrainedTokenizerBase, *user_turns: str) -> list[int]:
    messages = []
    for turn in user_turns:
        messages += [{"role": "user", "content": turn}, {"role": "assistant", "content": "ok"}]
    return tokenizer.apply_chat_template(messages[:-1], add_generation_prompt=True, tokenize=True, return_dict=False)


def test_matching_last_user_turn_is_teacher_forced(
    scripted: httpx.Client, tokenizer: PreTrainedTokenizerBase, reference_model: PreTrainedModel
) -> None:
    prompt = _chat(tokenizer, "What is the weather in Paris?")
    body = complete(scripted, prompt=prompt, max_tokens=64, temperature=1.0, logprobs=0, return_token_ids=True)
    choice = body["choices"][0]
    expected = tokenizer.encode(REPLY, add_special_tokens=False) + [tokenizer.eos_token_id]
    assert choice["token_ids"] == expected
    assert choice["finish_reason"] == "stop"
    assert_logprobs_match(reference_model, choice, 1.0)


def test_only_the_last_user_turn_counts(
    scripted: httpx.Client, tokenizer: PreTrainedTokenizerBase, reference_model: PreTrainedModel
) -> None:
    prompt = _chat(tokenizer, "What is the weather in Paris?", "Thanks, bye.")
    body = complete(scripted, prompt=prompt, max_tokens=8, temperature=0, return_token_ids=True, ignore_eos=True)
    forced = tokenizer.encode(REPLY, add_special_tokens=False)
    # An earlier turn matching the script changes nothing: the model answers on its own.
    assert body["choices"][0]["token_ids"] == greedy_reference(reference_model, prompt, 8) != forced[:8]
