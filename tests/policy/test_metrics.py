"""The hf policy server's `/metrics` (a server of its own: a weight update changes what it serves):
completions move the request and token counters by exactly what was answered, a refused request
moves none of the tokens, a weight update moves the version and the reload count."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from transformers import PreTrainedModel

from testkit.servers import start_server
from tests.policy.helpers import complete, perturbed_weights, write_weights
from tests.prometheus import Scrape

pytestmark = pytest.mark.needs("process")


def scrape(client: httpx.Client) -> Scrape:
    reply = client.get("/metrics")
    assert reply.status_code == 200, reply.text
    return Scrape(reply.text)


def test_completions_tokens_and_weight_reloads(tiny_model: Path, reference_model: PreTrainedModel, tmp_path: Path):
    with start_server(["serve", "policy", "--model", str(tiny_model)]) as server, \
            httpx.Client(base_url=server.url, timeout=120) as client:
        before = scrape(client)
        assert before.value("veri_policy_generated_tokens_total") == 0
        assert before.value("veri_policy_weight_version") == 0
        assert before.value("veri_policy_weight_reloads_total") == 0

        answers = [complete(client, prompt=prompt, max_tokens=max_tokens, n=n, temperature=1.0, seed=7,
                            return_token_ids=True)
                   for prompt, max_tokens, n in (([5, 6, 7, 8], 6, 1), ([9, 10, 11], 4, 3), ([12] * 20, 9, 2))]
        refused = client.post("/v1/completions", json={"prompt": [5, 6], "max_tokens": 4, "stop": ["x"]})
        assert refused.status_code == 400

        sampled = sum(len(choice["token_ids"]) for answer in answers for choice in answer["choices"])
        after = scrape(client)
        assert sampled > 0
        assert after.value("veri_policy_generated_tokens_total") == sampled
        # vLLM's usage counts a prompt once per request, whatever n is.
        assert after.value("veri_policy_prompt_tokens_total") == 4 + 3 + 20
        assert after.value("veri_policy_requests_total", route="/v1/completions", status="200") == 3
        assert after.value("veri_policy_requests_total", route="/v1/completions", status="400") == 1
        assert after.value("veri_policy_requests_in_flight", route="/v1/completions") == 0
        assert after.value("veri_policy_waiting_requests") == 0 and after.value("veri_policy_active_rows") == 0

        weights = write_weights(perturbed_weights(reference_model, scale=0.1, seed=3), tmp_path / "w.safetensors")
        for version in (4, 5):
            reply = client.post("/update_weights", json={"path": str(weights), "policy_version": version})
            assert reply.status_code == 200, reply.text
        updated = scrape(client)
        assert updated.value("veri_policy_weight_version") == 5
        assert updated.value("veri_policy_weight_reloads_total") == 2
        assert updated.value("veri_policy_engine_failures_total") == 0
