"""Bad input gets a 400 in OpenAI's error shape and never wedges the server."""

from __future__ import annotations

import httpx
import pytest
from transformers import PreTrainedModel

from tests.policy.helpers import complete


def _error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == status and error["message"]
    return error


def test_malformed_json(client: httpx.Client) -> None:
    response = client.post("/v1/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert "JSON" in _error(response, 400)["message"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "prompt"),
        ({"prompt": [1, 2], "max_tokens": 0}, "max_tokens"),
        ({"prompt": [1, 2], "max_tokens": "many"}, "max_tokens"),
        ({"prompt": [1, 2], "temperature": -1}, "temperature"),
        ({"prompt": [1, 2], "top_p": 0}, "top_p"),
        ({"prompt": [1, 2], "n": 0}, "n"),
        ({"prompt": [1, 2], "logprobs": 1000}, "logprobs"),
        ({"prompt": []}, "prompt"),
        ({"prompt": [[1, 2], []]}, "prompt"),
        ({"prompt": [1, -5]}, "prompt"),
        ({"prompt": [1, 10**9]}, "prompt"),
        ({"prompt": [1, 2], "stop": ["\n"]}, "stop"),
        ({"prompt": [1, 2], "stream": True}, "stream"),
        ({"prompt": [1, 2], "presence_penalty": 0.5}, "presence_penalty"),
        ({"prompt": [1, 2], "n": 10**4}, "n"),
    ],
)
def test_invalid_requests(client: httpx.Client, body: dict, param: str) -> None:
    error = _error(client.post("/v1/completions", json=body), 400)
    assert error["param"] is not None and error["param"].startswith(param), error


def test_prompt_too_long_names_the_limits(client: httpx.Client, reference_model: PreTrainedModel) -> None:
    limit = reference_model.config.max_position_embeddings
    error = _error(client.post("/v1/completions", json={"prompt": [1] * (limit - 10), "max_tokens": 11}), 400)
    assert str(limit) in error["message"] and str(limit + 1) in error["message"]
    error = _error(client.post("/v1/completions", json={"prompt": [[1, 2], [1] * limit], "max_tokens": 1}), 400)
    assert str(limit) in error["message"]


def test_unknown_model(client: httpx.Client) -> None:
    error = _error(client.post("/v1/completions", json={"prompt": [1, 2], "model": "nope"}), 404)
    assert error["param"] == "model"


def test_neutral_values_of_unsupported_parameters_are_accepted(client: httpx.Client) -> None:
    complete(client, prompt=[1, 2], max_tokens=2, stream=False, top_k=-1, stop=[], presence_penalty=0, echo=False)


def test_unknown_route_is_openai_shaped(client: httpx.Client) -> None:
    _error(client.get("/v1/nothing"), 404)


def test_server_still_serves_after_errors(client: httpx.Client) -> None:
    for _ in range(3):
        client.post("/v1/completions", content=b"]", headers={"content-type": "application/json"})
        client.post("/update_weights", json={"path": "/no/such/file.safetensors"})
    assert complete(client, prompt=[1, 2, 3], max_tokens=3)["choices"][0]["finish_reason"] in ("stop", "length")
