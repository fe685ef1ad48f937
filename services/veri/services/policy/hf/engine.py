"""`DecodeBatch`: the batched decode loop over a transformers model with one shared KV cache.

Each row is one completion (one choice of one prompt). Rows are left-padded to a common cache length;
every row carries its own attention mask and position ids, so a row's logits do not depend on what
else is in the batch (up to float rounding). Rows join between decode steps (`admit`: a prefill of the
new prompts whose cache is left-padded and concatenated to the running one) and leave as soon as they
finish (their cache rows are dropped, and leading columns that are padding for every row are trimmed).

Stop rule (vLLM's): a row finishes with `stop` when it samples one of its stop ids, and that id IS
kept as the last entry of `token_ids` (vLLM appends the sampled token before checking stop conditions,
for the model's eos and for `stop_token_ids` alike), with `length` after `max_tokens` tokens otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import torch
from transformers import DynamicCache, PreTrainedModel

from veri.services.policy.hf.sampler import RowSampling, Sample, sample_rows


@dataclass(eq=False)
class Row:
    prompt: list[int]
    sampling: RowSampling
    max_tokens: int
    stop_ids: frozenset[int]
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    finish_reason: Literal["stop", "length"] | None = None
    forced: list[int] | None = None  # teacher-forced completion (scripted replies, test-only)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def next_forced(self) -> int | None:
        if self.forced is None or len(self.token_ids) >= len(self.forced):
            return None
        return self.forced[len(self.token_ids)]

    def record(self, sample: Sample) -> None:
        self.token_ids.append(sample.token)
        if self.sampling.num_logprobs is not None:
            self.logprobs.append(sample.logprob)
            self.top_logprobs.append(sample.top or [])
        if sample.token in self.stop_ids:
            self.finish_reason = "stop"
        elif len(self.token_ids) >= self.max_tokens:
            self.finish_reason = "length"


class DecodeBatch:
    """Not thread-safe: owned by the engine thread."""

    def __init__(self, model: PreTrainedModel, pad_token_id: int = 0) -> None:
        self.model = model
        self.pad_token_id = pad_token_id
        self.rows: list[Row] = []
        self.cache: DynamicCache | None = None
        self.mask = torch.zeros(0, 0, dtype=torch.long)  # [rows, cache length]: 1 = real token
        self.positions = torch.zeros(0, dtype=torch.long)  # position id of each row's last sampled token

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def cache_length(self) -> int:
        return self.mask.shape[1]

    @torch.no_grad()
    def admit(self, rows: list[Row]) -> list[Row]:
        """Prefill `rows`, sample their first token, and add them to the batch. Returns rows already done."""
        lengths = torch.tensor([len(r.prompt) for r in rows])
        width = int(lengths.max())
        input_ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            input_ids[i, width - len(row.prompt) :] = torch.tensor(row.prompt)
            mask[i, width - len(row.prompt) :] = 1
        position_ids = (mask.cumsum(dim=1) - 1).clamp(min=0)
        out = self.model(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=position_ids,
            cache=DynamicCache(),
            use_cache=True,
            logits_to_keep=1,
        )
        self._record(rows, out.logits[:, -1, :])
        self._merge(rows, out.cache, mask, lengths)
        return self._drop_finished()

    @torch.no_grad()
    def step(self) -> list[Row]:
        """Feed every row its last sampled token and sample the next. Returns the rows that finished."""
        input_ids = torch.tensor([[row.token_ids[-1]] for row in self.rows])
        mask = torch.cat([self.mask, torch.ones((len(self.rows), 1), dtype=torch.long)], dim=1)
        out = self.model(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=self.positions[:, None],
            cache=self.cache,
            use_cache=True,
        )
        self.cache, self.mask, self.positions = out.cache, mask, self.positions + 1
        self._record(self.rows, out.logits[:, -1, :])
        return self._drop_finished()

    def clear(self) -> list[Row]:
        """Forget every row (after a failed forward pass). Returns the rows that were in the batch."""
        rows, self.rows, self.cache = self.rows, [], None
        self.mask, self.positions = self.mask[:0, :0], self.positions[:0]
        return rows

    def _record(self, rows: list[Row], logits: torch.Tensor) -> None:
        samples = sample_rows(logits, [r.sampling for r in rows], [r.next_forced() for r in rows])
        for row, sample in zip(rows, samples, strict=True):
            row.record(sample)

    def _merge(self, rows: list[Row], cache: DynamicCache, mask: torch.Tensor, lengths: torch.Tensor) -> None:
        if not self.rows:
            self.rows, self.cache, self.mask, self.positions = list(rows), cache, mask, lengths.clone()
            return
        width = max(self.cache_length, mask.shape[1])
        def stack(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return torch.cat([_left_pad(a, width), _left_pad(b, width)])

        self.cache = DynamicCache(
            ddp_cache_data=[
                (stack(ka, kb), stack(va, vb)) for (ka, va, _), (kb, vb, _) in zip(self.cache, cache, strict=True)
            ]
        )
        self.mask = stack(self.mask, mask)
        self.positions = torch.cat([self.positions, lengths])
        self.rows += rows

    def _drop_finished(self) -> list[Row]:
        done = [row for row in self.rows if row.finished]
        if not done:
            return done
        keep = torch.tensor([i for i, row in enumerate(self.rows) if not row.finished], dtype=torch.long)
        if len(keep) == 0:
            self.clear()
            return done
        self.rows = [self.rows[i] for i in keep.tolist()]
        self.mask, self.positions = self.mask[keep], self.positions[keep]
        lead = int((self.mask.sum(dim=0) == 0).cumprod(dim=0).sum())  # columns that are padding for all rows
        self.mask = self.mask[:, lead:]
        self.cache = _map_cache(self.cache, lambda t: t[keep, :, lead:, :])
        return done


def _left_pad(t: torch.Tensor, width: int) -> torch.Tensor:
    """Pad the sequence dim (-2 for cache tensors [b, heads, seq, dim], -1 for masks [b, seq]) on the left."""
    seq_dim = -2 if t.dim() == 4 else -1
    missing = width - t.shape[seq_dim]
    if missing == 0:
        return t
    shape = list(t.shape)
    shape[seq_dim] = missing
    return torch.cat([t.new_zeros(shape), t], dim=seq_dim)


def _map_cache(cache: DynamicCache, fn: Callable[[torch.Tensor], torch.Tensor]) -> DynamicCache:
    return DynamicCache(ddp_cache_data=[(fn(k), fn(v)) for k, v, _ in cache])
