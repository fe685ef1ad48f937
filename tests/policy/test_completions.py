"""`/v1/completions` over real HTTP: vLLM's field names, determinism, n, stop ids, lengths."""

from __future__ import annotations

import httpx
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from tests.policy.helpers import complete, greedy_reference


def test_health_and_models(client: httpx.Client, reference_model: PreTrainedModel) -> None:
    assert client.get("/health").status_code == 200
    models = client.get("/v1/models").json()
    assert models["object"] == "list"
    (card,) = models["data"]
    assert card["object"] == "model"
    assert card["max_model_len"] == reference_model.config.max_position_embeddings
    assert isinstance(card["id"], str) and card["id"]


def test_response_shape_with_token_ids(client: httpx.Client, prompts: list[list[int]]) -> None:
    prompt = prompts[1]
    body = complete(client, prompt=prompt, max_tokens=5, temperature=0, logprobs=0, return_token_ids=True)
    assert body["object"] == "text_completion"
    assert body["id"] and isinstance(body["created"], int) and body["model"]
    assert isinstance(body["policy_version"], int)
    (choice,) = body["choices"]
    assert choice["index"] == 0
    assert choice["prompt_token_ids"] == prompt
    assert len(choice["token_ids"]) == 5
    assert choice["finish_reason"] in ("stop", "length")
    assert isinstance(choice["text"], str)
    logprobs = choice["logprobs"]
    assert len(logprobs["tokens"]) == len(logprobs["token_logprobs"]) == len(logprobs["text_offset"]) == 5
    assert all(len(entry) == 1 for entry in logprobs["top_logprobs"])  # logprobs=0: the sampled token only
    assert body["usage"] == {"prompt_tokens": len(prompt), "completion_tokens": 5, "total_tokens": len(prompt) + 5,
                             "prompt_tokens_details": None}  # vLLM's field; the hf backend has no prefix cache


def test_token_ids_only_when_asked(client: httpx.Client, prompts: list[list[int]]) -> None:
    (choice,) = complete(client, prompt=prompts[0], max_tokens=3)["choices"]
    assert choice["token_ids"] is None and choice["prompt_token_ids"] is None and choice["logprobs"] is None


def test_text_prompt_is_tokenized(client: httpx.Client, tokenizer: PreTrainedTokenizerBase) -> None:
    text = "Extract every URL from the page below."
    (choice,) = complete(client, prompt=text, max_tokens=2, return_token_ids=True)["choices"]
    assert choice["prompt_token_ids"] == tokenizer(text).input_ids


def test_greedy_is_deterministic_and_matches_argmax(
    client: httpx.Client, prompts: list[list[int]], reference_model: PreTrainedModel
) -> None:
    request = {"prompt": prompts[2], "max_tokens": 12, "temperature": 0, "return_token_ids": True, "ignore_eos": True}
    first = complete(client, **request)["choices"][0]["token_ids"]
    second = complete(client, **request)["choices"][0]["token_ids"]
    tiny_temperature = complete(client, **(request | {"temperature": 1e-9}))["choices"][0]["token_ids"]
    assert first == second == tiny_temperature == greedy_reference(reference_model, prompts[2], 12)


def test_seeded_sampling_is_deterministic(client: httpx.Client, prompts: list[list[int]]) -> None:
    request = {"prompt": prompts[1], "max_tokens": 16, "temperature": 1.0, "return_token_ids": True, "ignore_eos": True}
    a = complete(client, seed=1234, **request)["choices"][0]["token_ids"]
    b = complete(client, seed=1234, **request)["choices"][0]["token_ids"]
    c = complete(client, seed=4321, **request)["choices"][0]["token_ids"]
    assert a == b
    assert a != c


def test_n_choices_per_prompt(client: httpx.Client, prompts: list[list[int]]) -> None:
    batch = [prompts[0], prompts[3]]
    body = complete(client, prompt=batch, n=3, max_tokens=6, seed=7, return_token_ids=True, ignore_eos=True)
    choices = body["choices"]
    assert [c["index"] for c in choices] == list(range(6))
    assert [c["prompt_token_ids"] for c in choices] == [batch[0]] * 3 + [batch[1]] * 3
    # vLLM seeds choice j with seed + j: the three choices differ, and choice j equals a lone request with seed + j
    assert len({tuple(c["token_ids"]) for c in choices[:3]}) == 3
    lone = complete(client, prompt=batch[0], max_tokens=6, seed=8, return_token_ids=True, ignore_eos=True)
    assert lone["choices"][0]["token_ids"] == choices[1]["token_ids"]
    assert body["usage"]["prompt_tokens"] == len(batch[0]) + len(batch[1])
    assert body["usage"]["completion_tokens"] == 36


def test_max_tokens_finishes_with_length(client: httpx.Client, prompts: list[list[int]]) -> None:
    (choice,) = complete(client, prompt=prompts[0], max_tokens=7, return_token_ids=True, ignore_eos=True)["choices"]
    assert choice["finish_reason"] == "length"
    assert choice["stop_reason"] is None
    assert len(choice["token_ids"]) == 7


def test_stop_token_ids_stop_and_are_kept(client: httpx.Client, prompts: list[list[int]]) -> None:
    request = {"prompt": prompts[2], "temperature": 0, "return_token_ids": True, "ignore_eos": True}
    free = complete(client, max_tokens=10, **request)["choices"][0]["token_ids"]
    stop = free[4]
    (choice,) = complete(client, max_tokens=10, stop_token_ids=[stop], **request)["choices"]
    cut = free.index(stop) + 1
    assert choice["token_ids"] == free[:cut]  # the stop token is the last token, as vLLM returns it
    assert choice["finish_reason"] == "stop"
    assert choice["stop_reason"] == stop


def test_top_logprobs(client: httpx.Client, prompts: list[list[int]]) -> None:
    body = complete(client, prompt=prompts[1], max_tokens=4, temperature=0, logprobs=3, return_token_ids=True)
    logprobs = body["choices"][0]["logprobs"]
    for sampled, top in zip(logprobs["token_logprobs"], logprobs["top_logprobs"], strict=True):
        assert 1 <= len(top) <= 4  # the sampled token plus the top 3 (merged when they coincide)
        assert max(top.values()) == sampled  # greedy: the sampled token is the most likely one


def test_tokens_as_token_ids(client: httpx.Client, prompts: list[list[int]]) -> None:
    body = complete(
        client, prompt=prompts[1], max_tokens=3, logprobs=1, return_token_ids=True, return_tokens_as_token_ids=True
    )
    choice = body["choices"][0]
    assert choice["logprobs"]["tokens"] == [f"token_id:{t}" for t in choice["token_ids"]]
    assert all(key.startswith("token_id:") for top in choice["logprobs"]["top_logprobs"] for key in top)


def test_policy_version_route(client: httpx.Client) -> None:
    assert isinstance(client.get("/policy_version").json()["policy_version"], int)
