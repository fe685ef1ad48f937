"""One sampling step for a batch of rows, each with its own temperature, top-p and generator.

Logprob semantics (what `logprobs` reports for a sampled token):

    logprob = log_softmax(logits / temperature)[token]        (temperature 0: log_softmax(logits))

over the full vocabulary, i.e. *before* top-p truncation. That is exactly what TRL's GRPO trainer
computes for the same tokens (`selective_log_softmax(logits / temperature)` in
`_get_per_token_logps_and_entropies`), so old/new importance ratios are 1 when the weights are the
same. vLLM with `--logprobs-mode processed_logprobs` (what TRL requires of its vLLM server) reports
the same number when top_p == 1; with top_p < 1 vLLM renormalizes over the nucleus and TRL does not,
and we side with the trainer. Greedy rows (temperature below 1e-5, vLLM's `_SAMPLING_EPS`) take the
argmax and report raw-logit logprobs, as vLLM does. Sampling itself honours top_p: the token is drawn
from the renormalized nucleus (a job never asks for it: core/sampling.py).

The request's temperature and top_p are the whole sampling: the model folder's generation_config.json
(top_k, min_p, repetition_penalty, its own temperature) is never read here; the loader takes only its
stop ids from it. Anything else a request asks for is refused (serving.py `_UNSUPPORTED`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

GREEDY_BELOW = 1e-5  # vLLM's _SAMPLING_EPS: lower temperatures are greedy


@dataclass
class RowSampling:
    temperature: float
    top_p: float
    generator: torch.Generator
    num_logprobs: int | None  # None: no logprobs; 0: the sampled token's; k: plus the top k


@dataclass(frozen=True)
class Sample:
    token: int
    logprob: float
    top: list[tuple[int, float]] | None  # sampled token first, then the top k (vLLM's order)


@torch.no_grad()
def sample_rows(
    logits: torch.Tensor, rows: list[RowSampling], forced: list[int | None] | None = None
) -> list[Sample]:
    """`logits` is [rows, vocab] for each row's next position. A row whose `forced` entry is a token id
    takes that token instead of sampling (teacher forcing), with its logprob computed the same way."""
    logits = logits.float()
    temps = torch.tensor([1.0 if _greedy(r) else r.temperature for r in rows], dtype=torch.float32)
    logprobs = torch.log_softmax(logits / temps[:, None], dim=-1)
    forced = forced or [None] * len(rows)
    return [_sample_row(logprobs[i], row, forced[i]) for i, row in enumerate(rows)]


def _sample_row(logprobs: torch.Tensor, row: RowSampling, forced: int | None) -> Sample:
    if forced is not None:
        token = forced
    elif _greedy(row):
        token = int(torch.argmax(logprobs))
    else:
        token = _draw_top_p(logprobs, row.top_p, row.generator)
    logprob = float(logprobs[token])
    top = None
    if row.num_logprobs is not None:
        top = [(token, logprob)]
        if row.num_logprobs > 0:
            values, ids = torch.topk(logprobs, k=min(row.num_logprobs, logprobs.numel()))
            top += list(zip(ids.tolist(), values.tolist(), strict=True))
    return Sample(token=token, logprob=logprob, top=top)


def _greedy(row: RowSampling) -> bool:
    return row.temperature < GREEDY_BELOW


def _draw_top_p(logprobs: torch.Tensor, top_p: float, generator: torch.Generator) -> int:
    probs = logprobs.exp()
    if top_p >= 1.0:
        return int(torch.multinomial(probs, 1, generator=generator))
    sorted_probs, order = torch.sort(probs, descending=True)
    # keep the smallest prefix whose mass reaches top_p (the first token always stays)
    keep = (torch.cumsum(sorted_probs, dim=0) - sorted_probs) < top_p
    kept = torch.where(keep, sorted_probs, torch.zeros_like(sorted_probs))
    return int(order[torch.multinomial(kept, 1, generator=generator)])
