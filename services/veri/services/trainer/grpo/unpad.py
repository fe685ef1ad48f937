"""The model sees each row without the padding the whole batch shares.

TRL pads a generation batch to its longest prompt (on the left) and its longest completion (on the
right), and scores it in chunks (`per_device_train_batch_size` rows for the trainer's own logprobs, the
micro-batch in the loss) that keep that width. A rollout's rows differ a lot in length (Claude Code's
main row ~22k tokens, its sub-agent's ~15k), and a padded row costs twice: the pad columns are
computed, and the attention mask then holds zeros, so PyTorch's SDPA drops its fused causal kernel (on
CPU for one that materialises the L x L scores: a 22k-token row padded by 1k columns takes 3x the time
and 7x the memory of the same row unpadded). So each chunk is cut to the columns its rows use, and a
chunk still padded and at least `ROW_BY_ROW_WIDTH` wide is scored one row at a time, each at its own
length (one such row fills the device; shorter rows stay batched, where one forward for all beats the
padding). The logprobs (and entropies) of the columns cut on the right are 0: completion padding, masked out of the
loss and every metric (completion_mask 0). Positions shift with the left cut, which rotary embeddings
do not see (they depend only on the distance between tokens); `tests/trainer/test_unpad.py` checks the
logprobs and gradients equal TRL's over the padded batch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# A padded chunk at least this wide is scored one row at a time.
ROW_BY_ROW_WIDTH = 2048
# (input_ids, attention_mask, logits_to_keep) -> (logps, entropies or None, aux_loss or None), one forward
Score = Callable[[Any, Any, int], tuple[Any, Any, Any]]


def used_columns(mask: Any, logits_to_keep: int) -> tuple[int, int]:
    """[first, last) of the columns any row of `mask` attends to, keeping at least the last prompt column
    and the first completion column (the layout TRL's scoring slices by)."""
    width = mask.size(1)
    prompt_width = width - logits_to_keep
    used = mask.any(dim=0).nonzero()
    if used.numel() == 0:
        return 0, width
    first = min(int(used[0]), max(prompt_width - 1, 0))
    last = max(int(used[-1]) + 1, prompt_width + 1)
    return first, last


def score_unpadded(score: Score, input_ids: Any, attention_mask: Any, logits_to_keep: int,
                   batch_size: int | None) -> tuple[Any, Any, Any]:
    """TRL's `_get_per_token_logps_and_entropies` result for the whole batch, each chunk of `batch_size`
    rows (a wide padded one row by row) scored by `score` on only the columns it uses."""
    import torch
    import torch.nn.functional as F

    batch_size = batch_size or input_ids.size(0)
    width = input_ids.size(1)
    logps, entropies, aux_losses = [], [], []
    for start in range(0, input_ids.size(0), batch_size):
        rows = range(start, min(start + batch_size, input_ids.size(0)))
        first, last = used_columns(attention_mask[rows.start:rows.stop], logits_to_keep)
        padded = bool((attention_mask[rows.start:rows.stop, first:last] == 0).any())
        groups = [rows[i:i + 1] for i in range(len(rows))] if padded and last - first >= ROW_BY_ROW_WIDTH else [rows]
        for group in groups:
            mask = attention_mask[group.start:group.stop]
            first, last = used_columns(mask, logits_to_keep)
            cut = width - last  # completion padding on the right
            found, entropy, aux = score(input_ids[group.start:group.stop, first:last], mask[:, first:last],
                                        logits_to_keep - cut)
            logps.append(F.pad(found, (0, cut)))
            if entropy is not None:
                entropies.append(F.pad(entropy, (0, cut)))
            if aux is not None:
                aux_losses.append(aux)
    return (torch.cat(logps), torch.cat(entropies) if entropies else None,
            torch.stack(aux_losses).mean() if aux_losses else None)
