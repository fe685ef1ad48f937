"""`DecodeBatch` and the sampler without HTTP: rows joining and leaving a running batch."""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from tests.policy.helpers import LOGPROB_TOL, full_forward_logprobs
from veri.services.policy.hf.engine import DecodeBatch, Row
from veri.services.policy.hf.sampler import RowSampling, Sample, sample_rows


def _row(prompt: list[int], temperature: float, seed: int, max_tokens: int, stop: frozenset[int] = frozenset()) -> Row:
    sampling = RowSampling(temperature, 1.0, torch.Generator().manual_seed(seed), num_logprobs=0)
    return Row(prompt=prompt, sampling=sampling, max_tokens=max_tokens, stop_ids=stop)


def _drain(batch: DecodeBatch) -> list[Row]:
    done = []
    while len(batch):
        done += batch.step()
    return done


def test_rows_joining_mid_decode_match_the_full_forward(
    reference_model: PreTrainedModel, prompts: list[list[int]]
) -> None:
    batch = DecodeBatch(reference_model)
    first = [_row(prompts[0], 1.0, 1, 20), _row(prompts[3], 0.7, 2, 9), _row(prompts[1], 0.0, 3, 30)]
    done = batch.admit(first)
    for _ in range(5):
        done += batch.step()
    late = [_row(prompts[2], 1.0, 4, 25), _row(prompts[0], 0.7, 5, 12)]
    done += batch.admit(late)
    done += _drain(batch)
    assert {id(r) for r in done} == {id(r) for r in first + late}
    for row in first + late:
        assert len(row.token_ids) == row.max_tokens and row.finish_reason == "length"
        want = full_forward_logprobs(reference_model, row.prompt, row.token_ids, row.sampling.temperature)
        assert max(abs(a - b) for a, b in zip(row.logprobs, want, strict=True)) < LOGPROB_TOL


def test_a_seeded_row_does_not_depend_on_its_batch(reference_model: PreTrainedModel, prompts: list[list[int]]) -> None:
    alone = DecodeBatch(reference_model)
    row = _row(prompts[2], 1.0, 42, 16)
    alone.admit([row])
    _drain(alone)
    crowded = DecodeBatch(reference_model)
    twin = _row(prompts[2], 1.0, 42, 16)
    crowded.admit([_row(prompts[3], 1.0, 0, 30), _row(prompts[0], 0.7, 1, 5)])
    crowded.step()
    crowded.admit([twin])
    _drain(crowded)
    assert twin.token_ids == row.token_ids


def test_cache_is_trimmed_when_long_rows_leave(reference_model: PreTrainedModel, prompts: list[list[int]]) -> None:
    batch = DecodeBatch(reference_model)
    batch.admit([_row(prompts[3], 1.0, 0, 2), _row(prompts[0], 1.0, 1, 6)])
    batch.step()  # the long-prompt row finishes here
    assert len(batch) == 1
    assert batch.cache_length == len(prompts[0]) + 1  # its left padding is gone
    _drain(batch)
    assert len(batch) == 0


def test_stop_token_is_kept_and_finishes_the_row() -> None:
    row = _row([1], 1.0, 0, max_tokens=5, stop=frozenset({7}))
    row.record(Sample(token=3, logprob=-1.0, top=[(3, -1.0)]))
    assert not row.finished
    row.record(Sample(token=7, logprob=-2.0, top=[(7, -2.0)]))
    assert row.token_ids == [3, 7] and row.finish_reason == "stop"


def test_max_tokens_finishes_with_length() -> None:
    row = _row([1], 1.0, 0, max_tokens=2)
    for token in (3, 4):
        row.record(Sample(token=token, logprob=-1.0, top=None))
    assert row.finish_reason == "length" and row.token_ids == [3, 4]


def test_top_p_truncates_sampling_but_not_the_reported_logprob() -> None:
    logits = torch.tensor([[3.0, 2.9, 1.0, 0.0]])
    full = torch.log_softmax(logits[0] / 0.8, dim=-1)
    for seed in range(50):
        sampling = RowSampling(0.8, 0.4, torch.Generator().manual_seed(seed), num_logprobs=2)
        (sample,) = sample_rows(logits, [sampling])
        assert sample.token == 0  # token 0 alone holds more than 40% of the mass
        assert abs(sample.logprob - float(full[0])) < 1e-6
        assert [t for t, _ in sample.top] == [0, 0, 1]  # sampled, then the top 2


def test_tiny_temperatures_are_greedy_with_raw_logprobs() -> None:
    logits = torch.tensor([[0.5, 2.0, 1.0]])
    (sample,) = sample_rows(logits, [RowSampling(1e-9, 1.0, torch.Generator(), num_logprobs=0)])
    assert sample.token == 1
    assert abs(sample.logprob - float(torch.log_softmax(logits[0], dim=-1)[1])) < 1e-6
