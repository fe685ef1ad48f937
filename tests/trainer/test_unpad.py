"""Rows scored without the batch's padding (`grpo.unpad`), on TRL 1.16's own scoring: the logprobs,
entropies and gradients equal TRL's over the padded batch (fp32), and the model sees a wide padded
chunk one row at a time, each at its own length, where SDPA's fused causal kernel runs."""

from __future__ import annotations

import pytest
import torch

from tests.trainer.records import scored
from tests.trainer.test_branch_rows import make_trainer
from veri.services.trainer.grpo import unpad
from veri.services.trainer.grpo.unpad import used_columns

# (prompt, completion) lengths: the batch's rows differ in both, as a rollout's main and sub-agent rows do
ROWS = [(40, 9), (25, 3), (12, 14)]


def padded_batch(rows: list[tuple[int, int]]) -> tuple[torch.Tensor, torch.Tensor, int]:
    """TRL's layout: prompts padded on the left to the longest, completions on the right."""
    generator = torch.Generator().manual_seed(0)
    prompt_width, keep = max(p for p, _ in rows), max(c for _, c in rows)
    ids = torch.zeros(len(rows), prompt_width + keep, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, (prompt, completion) in enumerate(rows):
        columns = slice(prompt_width - prompt, prompt_width + completion)
        ids[i, columns] = torch.randint(10, 5900, (prompt + completion,), generator=generator)
        mask[i, columns] = 1
    return ids, mask, keep


@pytest.fixture(scope="module")
def trainer(tiny_model, tmp_path_factory):
    return make_trainer(tiny_model, tmp_path_factory.mktemp("unpad"), [scored(0, 1, 0.0), scored(0, 2, 1.0)])


@pytest.fixture
def row_by_row(monkeypatch):
    """The test's rows are short: any padded chunk is wide enough to go row by row."""
    monkeypatch.setattr(unpad, "ROW_BY_ROW_WIDTH", 2)


def seen_widths(model) -> tuple[list, object]:
    widths: list = []
    hook = model.register_forward_pre_hook(lambda _, args, kwargs: widths.append(tuple(kwargs["input_ids"].shape)),
                                           with_kwargs=True)
    return widths, hook


# one row a chunk; two a chunk (the first two batched, cut to their columns); every row a chunk, row by row
@pytest.mark.parametrize(("batch_size", "by_row"), [(1, False), (2, False), (3, True)])
def test_unpadded_scores_equal_the_padded_ones(trainer, batch_size, by_row, monkeypatch):
    if by_row:
        monkeypatch.setattr(unpad, "ROW_BY_ROW_WIDTH", 2)
    from trl import GRPOTrainer

    ids, mask, keep = padded_batch(ROWS)
    completion_mask = mask[:, -keep:].bool()
    with torch.no_grad():
        padded, padded_entropy, _ = GRPOTrainer._get_per_token_logps_and_entropies(
            trainer, trainer.model, ids, mask, keep, batch_size=len(ROWS), compute_entropy=True)
        found, entropy, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, ids, mask, keep, batch_size=batch_size, compute_entropy=True)
    assert found.shape == padded.shape == entropy.shape == (len(ROWS), keep)
    torch.testing.assert_close(found[completion_mask], padded[completion_mask], atol=1e-5, rtol=0)
    torch.testing.assert_close(entropy[completion_mask], padded_entropy[completion_mask], atol=1e-5, rtol=0)
    if batch_size == 1 or by_row:  # every row alone: its completion padding is cut, so scored 0
        assert (found[~completion_mask] == 0).all()


def test_a_short_padded_chunk_stays_one_forward_cut_to_the_columns_it_uses(trainer):
    ids, mask, keep = padded_batch(ROWS)
    widths, hook = seen_widths(trainer.model)
    try:
        with torch.no_grad():
            trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, keep, batch_size=2)
    finally:
        hook.remove()
    # rows 0-1: prompts of 40 and 25, completions of 9 and 3; row 2 alone
    assert widths == [(2, 40 + 9), (1, 12 + 14)]


def test_the_model_sees_each_row_at_its_own_length_and_the_gradient_is_the_same(trainer, row_by_row):
    from trl import GRPOTrainer

    ids, mask, keep = padded_batch(ROWS)
    completion_mask = mask[:, -keep:]
    model = trainer.model

    def gradient(score) -> list[torch.Tensor]:
        model.zero_grad()
        logps = score()[0]
        (logps * completion_mask).sum().backward()
        return [p.grad.clone() for p in model.parameters() if p.grad is not None]

    widths, hook = seen_widths(model)
    try:  # the loss's micro-batch: one chunk of every row
        unpadded = gradient(lambda: trainer._get_per_token_logps_and_entropies(model, ids, mask, keep))
    finally:
        hook.remove()
    assert widths == [(1, prompt + completion) for prompt, completion in ROWS]
    padded = gradient(lambda: GRPOTrainer._get_per_token_logps_and_entropies(trainer, model, ids, mask, keep,
                                                                              batch_size=len(ROWS)))
    assert len(unpadded) == len(padded) > 0
    for found, expected in zip(unpadded, padded, strict=True):
        torch.testing.assert_close(found, expected, atol=1e-5, rtol=1e-4)


def test_used_columns_keep_the_prompt_completion_boundary():
    mask = torch.tensor([[0, 0, 1, 1, 1, 0], [0, 1, 1, 1, 0, 0]])
    assert used_columns(mask, 3) == (1, 5)  # prompt 3 columns, completion 3: pad on both sides cut
    # a chunk with no completion token (an empty filler row): the boundary's two columns stay
    assert used_columns(torch.tensor([[0, 0, 1, 0, 0]]), 2) == (2, 4)
    assert used_columns(torch.zeros(1, 4, dtype=torch.long), 2) == (0, 4)
