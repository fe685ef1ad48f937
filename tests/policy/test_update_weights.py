"""`POST /update_weights` on a server of its own (the shared one must keep the tiny model's weights)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from testkit.servers import start_server
from tests.policy.helpers import assert_logprobs_match, complete, peaked_weights, perturbed_weights, write_weights
from veri.core.policy_api import ServerProcess

pytestmark = pytest.mark.needs("process")


@pytest.fixture(scope="module")
def updatable(tiny_model: Path) -> Iterator[httpx.Client]:
    with start_server(["serve", "policy", "--model", str(tiny_model)]) as server:
        with httpx.Client(base_url=server.url, timeout=120) as c:
            yield c


def _version(client: httpx.Client) -> int:
    return client.get("/policy_version").json()["policy_version"]


def _update(client: httpx.Client, path: Path) -> httpx.Response:
    return client.post("/update_weights", json={"path": str(path)})


def _greedy(client: httpx.Client, n_tokens: int = 8) -> dict:
    return complete(
        client, prompt=[5, 6, 7, 8], max_tokens=n_tokens, temperature=0, logprobs=0, return_token_ids=True
    )["choices"][0]


def test_version_starts_at_zero_then_updates_bump_it(
    updatable: httpx.Client, reference_model: PreTrainedModel, tmp_path: Path
) -> None:
    assert _version(updatable) == 0
    before = _greedy(updatable)
    perturbed = perturbed_weights(reference_model, scale=0.2, seed=1)
    response = _update(updatable, write_weights(perturbed, tmp_path / "step1.safetensors"))
    assert response.status_code == 200, response.text
    assert response.json()["policy_version"] == 1
    assert _version(updatable) == 1
    # The server's process, the same in every answer (a restarted server is another: services/trainer/weights/served.py)
    process = ServerProcess.model_validate(response.json()["process"])
    assert ServerProcess.model_validate(updatable.get("/policy_version").json()["process"]) == process

    after = complete(updatable, prompt=[5, 6, 7, 8], max_tokens=8, temperature=0, logprobs=0, return_token_ids=True)
    assert after["policy_version"] == 1
    choice = after["choices"][0]
    assert choice["logprobs"]["token_logprobs"] != before["logprobs"]["token_logprobs"]
    # the new logprobs are exactly those of the new weights
    updated = AutoModelForCausalLM.from_config(reference_model.config).eval()
    updated.load_state_dict(perturbed)
    assert_logprobs_match(updated, choice, 0.0)


def test_folder_update_and_eos_stop_rule(
    updatable: httpx.Client, reference_model: PreTrainedModel, tiny_model: Path, tmp_path: Path
) -> None:
    """Weights that always pick eos: the row stops on its first token, which is kept (as vLLM does)."""
    eos = AutoTokenizer.from_pretrained(tiny_model).eos_token_id
    folder = tmp_path / "eos"
    folder.mkdir()
    write_weights(peaked_weights(reference_model, eos), folder / "model.safetensors")
    version = _version(updatable)
    assert _update(updatable, folder).json()["policy_version"] == version + 1

    choice = _greedy(updatable)
    assert choice["token_ids"] == [eos]
    assert choice["finish_reason"] == "stop"
    assert choice["stop_reason"] is None  # the tokenizer's eos: vLLM reports no stop_reason
    ignoring = complete(updatable, prompt=[5, 6], max_tokens=4, temperature=0, ignore_eos=True, return_token_ids=True)
    assert ignoring["choices"][0]["token_ids"] == [eos] * 4
    assert ignoring["choices"][0]["finish_reason"] == "length"


def test_generation_config_eos_ids_stop_too(
    updatable: httpx.Client, reference_model: PreTrainedModel, tiny_model: Path, tmp_path: Path
) -> None:
    eos = AutoTokenizer.from_pretrained(tiny_model).eos_token_id
    generation_eos = reference_model.generation_config.eos_token_id
    others = sorted(set([generation_eos] if isinstance(generation_eos, int) else generation_eos or []) - {eos})
    assert others, f"the tiny model's generation config lost its second eos id: {generation_eos}"
    token = others[0]
    response = _update(updatable, write_weights(peaked_weights(reference_model, token), tmp_path / "w.safetensors"))
    assert response.status_code == 200, response.text
    choice = _greedy(updatable)
    assert choice["token_ids"] == [token]
    assert choice["finish_reason"] == "stop"
    assert choice["stop_reason"] == token


def _bad_updates(model: PreTrainedModel, tmp_path: Path) -> list[tuple[Path, str]]:
    state = perturbed_weights(model, scale=0.1, seed=2)
    name = next(k for k in state if ".layers." in k and k.endswith("proj.weight"))  # not a tied tensor
    renamed = {("renamed." + k if k == name else k): v for k, v in state.items()}
    reshaped = {k: (v[:-1] if k == name else v) for k, v in state.items()}
    missing = {k: v for k, v in state.items() if k != name}
    nonfinite = {k: (torch.full_like(v, float("nan")) if k == name else v) for k, v in state.items()}
    (tmp_path / "empty").mkdir()
    (tmp_path / "garbage.safetensors").write_bytes(b"not a safetensors file")
    cases = []
    if "lm_head.weight" in state and model.config.tie_word_embeddings:
        untied = {k: (v + 1 if k == "lm_head.weight" else v) for k, v in state.items()}
        cases.append((write_weights(untied, tmp_path / "untied.safetensors"), "tied tensors"))
    return cases + [
        (tmp_path / "nothing-here.safetensors", "no such file"),
        (tmp_path / "empty", "no *.safetensors"),
        (tmp_path / "garbage.safetensors", "not a readable safetensors"),
        (write_weights(renamed, tmp_path / "renamed.safetensors"), "renamed." + name),
        (write_weights(reshaped, tmp_path / "reshaped.safetensors"), name),
        (write_weights(missing, tmp_path / "missing.safetensors"), "missing"),
        (write_weights(nonfinite, tmp_path / "nan.safetensors"), "non-finite"),
    ]


def test_bad_updates_are_refused_and_keep_the_old_weights(
    updatable: httpx.Client, reference_model: PreTrainedModel, tmp_path: Path
) -> None:
    version = _version(updatable)
    before = _greedy(updatable)
    for path, expected in _bad_updates(reference_model, tmp_path):
        response = _update(updatable, path)
        assert response.status_code == 400, response.text
        message = response.json()["error"]["message"]
        assert expected in message, message
    assert _version(updatable) == version
    after = _greedy(updatable)
    assert after["token_ids"] == before["token_ids"]
    assert after["logprobs"]["token_logprobs"] == before["logprobs"]["token_logprobs"]


def test_update_body_is_validated(updatable: httpx.Client) -> None:
    for body in ({}, {"path": ""}, {"path": 3}, {"path": "x", "other": 1}):
        response = updatable.post("/update_weights", json=body)
        assert response.status_code == 400, (body, response.text)
        assert "error" in response.json()


def test_update_waits_for_rows_in_flight_and_requests_queue_behind_it(
    updatable: httpx.Client, reference_model: PreTrainedModel, tmp_path: Path
) -> None:
    """Rows in flight finish on the old weights; a request arriving meanwhile waits and gets the new ones."""
    version = _version(updatable)
    path = write_weights(perturbed_weights(reference_model, scale=0.1, seed=3), tmp_path / "next.safetensors")

    def stats() -> dict:
        return updatable.get("/stats").json()

    def wait_for(condition) -> None:
        deadline = time.monotonic() + 60
        while not condition(stats()):
            assert time.monotonic() < deadline, stats()
            time.sleep(0.002)

    with ThreadPoolExecutor(3) as pool:
        long = pool.submit(complete, updatable, prompt=[1, 2, 3], max_tokens=400, n=8, ignore_eos=True)
        wait_for(lambda s: s["active_rows"] > 0 or long.done())
        update = pool.submit(_update, updatable, path)
        wait_for(lambda s: s["pending_updates"] > 0 or update.done())
        queued = pool.submit(complete, updatable, prompt=[1, 2], max_tokens=2)
        assert long.result(timeout=120)["policy_version"] == version
        assert update.result(timeout=120).json()["policy_version"] == version + 1
        assert queued.result(timeout=120)["policy_version"] == version + 1


def test_the_trainer_can_name_the_version(updatable: httpx.Client, reference_model: PreTrainedModel,
                                          tmp_path: Path) -> None:
    """A resumed job pushes its checkpoint as version = its step, whatever the server counted."""
    path = write_weights(perturbed_weights(reference_model, scale=0.1, seed=3), tmp_path / "named.safetensors")
    response = updatable.post("/update_weights", json={"path": str(path), "policy_version": 7})
    assert response.status_code == 200 and response.json()["policy_version"] == 7
    assert _greedy(updatable, 2) and complete(updatable, prompt=[5], max_tokens=1)["policy_version"] == 7
    assert updatable.post("/update_weights", json={"path": str(path), "policy_version": -1}).status_code == 400
