"""Reference computations the hf policy server is checked against (run in the test process)."""

from __future__ import annotations

from pathlib import Path

import httpx
import torch
from safetensors.torch import save_file
from transformers import PreTrainedModel

LOGPROB_TOL = 1e-4


def complete(client: httpx.Client, **body) -> dict:
    response = client.post("/v1/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()


@torch.no_grad()
def full_forward_logprobs(
    model: PreTrainedModel, prompt: list[int], completion: list[int], temperature: float
) -> list[float]:
    """One unpadded forward over prompt + completion; logprob of each completion token under
    log_softmax(logits / temperature) (raw logits for temperature 0), as TRL's GRPO trainer computes it."""
    ids = torch.tensor([prompt + completion])
    logits = model(input_ids=ids).logits[0].float()
    logprobs = torch.log_softmax(logits / (temperature or 1.0), dim=-1)
    return [float(logprobs[len(prompt) - 1 + i, token]) for i, token in enumerate(completion)]


@torch.no_grad()
def greedy_reference(model: PreTrainedModel, prompt: list[int], max_tokens: int) -> list[int]:
    ids = list(prompt)
    for _ in range(max_tokens):
        ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt) :]


def assert_logprobs_match(model: PreTrainedModel, choice: dict, temperature: float) -> None:
    want = full_forward_logprobs(model, choice["prompt_token_ids"], choice["token_ids"], temperature)
    got = choice["logprobs"]["token_logprobs"]
    assert len(got) == len(want) == len(choice["token_ids"])
    worst = max(abs(a - b) for a, b in zip(got, want, strict=True))
    assert worst < LOGPROB_TOL, f"sampled logprobs differ from the full forward by {worst}"


def peaked_weights(model: PreTrainedModel, token: int) -> dict[str, torch.Tensor]:
    """Weights under which the model's argmax is `token` after any input.

    Every block is zeroed (the residual stream is the input embedding), every norm weight is 1, and every
    embedding / lm_head row is the same unit vector d except `token`'s, which is 4d; so the logit of
    `token` is 4x every other logit whatever the input.
    """
    state = {name: torch.zeros_like(t) for name, t in model.state_dict().items()}
    hidden = model.config.hidden_size
    direction = torch.zeros(hidden)
    direction[0] = 1.0
    for name, tensor in state.items():
        if name.endswith("norm.weight"):
            tensor.fill_(1.0)
        if name.endswith(("embed_tokens.weight", "lm_head.weight")):
            tensor[:] = direction
            tensor[token] = 4 * direction
    return state


def perturbed_weights(model: PreTrainedModel, scale: float, seed: int) -> dict[str, torch.Tensor]:
    """The model's weights plus noise; tied tensors (one storage, several names) stay tied."""
    generator = torch.Generator().manual_seed(seed)
    by_storage: dict[int, torch.Tensor] = {}
    state = {}
    for name, t in model.state_dict().items():
        key = t.untyped_storage().data_ptr()
        if key not in by_storage:
            by_storage[key] = t + scale * torch.randn(t.shape, generator=generator, dtype=t.dtype)
        state[name] = by_storage[key]
    return state


def write_weights(state: dict[str, torch.Tensor], path: Path) -> Path:
    save_file({name: t.clone().contiguous() for name, t in state.items()}, str(path))
    return path
