"""A rollout's branch rows added to TRL's generation batch, each with its rollout's advantage.

TRL's GRPOTrainer wants one completion per prompt: its advantages are computed over groups of
num_generations consecutive rows, and its rewards per row. A rollout whose history is a tree has several
rows (`core.branches`), so the rollout function puts the row that ends at the final answer in TRL's slot
(TRL scores it and computes the rollout's advantage from the group, exactly as before) and hands the
rollout's other rows over in the `veri_branch_rows` extra field. After TRL built the batch, `add_branch_rows`
appends those rows with the same tensors TRL builds for its own (padding, masks, the trainer's logprobs
for the off-policy ratio, the reference logprobs when beta != 0), each carrying its rollout's advantage,
and recounts the batch's loss tokens. The loss is TRL's: with dapo (TRL's default) it is normalised by
the generation batch's trained tokens, so a rollout weighs by its sampled tokens, however many rows.

The batch is padded with empty rows (loss mask 0) to a multiple of steps_per_generation, which TRL splits
it into: nothing is cut off.
"""

from __future__ import annotations

import math
from typing import Any

from veri.services.trainer.grpo import trl_internals
from veri.services.trainer.grpo.trl_internals import disable_gradient_checkpointing, pad, use_adapter

BRANCH_ROWS_FIELD = "veri_branch_rows"

PADDED = {  # output key -> (side, padding value) for the per-row tensors TRL's loss reads
    "prompt_ids": ("left", None), "prompt_mask": ("left", 0),
    "completion_ids": ("right", None), "completion_mask": ("right", 0), "tool_mask": ("right", 1),
    "old_per_token_logps": ("right", 0.0), "sampling_per_token_logps": ("right", 0.0),
    "ref_per_token_logps": ("right", 0.0), "importance_sampling_ratio": ("right", 1.0),
}


def branch_rows(inputs: list[dict[str, Any]]) -> list[tuple[int, dict[str, list[Any]]]]:
    """(position of the rollout in the batch, row) for every branch row the rollout function handed over."""
    return [(at, row) for at, item in enumerate(inputs) for row in item.get(BRANCH_ROWS_FIELD) or []]


def add_branch_rows(
    trainer: Any, output: dict[str, Any], rows: list[tuple[int, dict[str, list[Any]]]]
) -> dict[str, Any]:
    """TRL's generation batch `output` with `rows` appended (and padded to split evenly)."""
    import torch

    split = trainer.args.steps_per_generation if trainer.model.training else 1
    empty = (-(len(output["advantages"]) + len(rows))) % split
    if not rows and not empty:
        return output
    known = {*PADDED, "advantages", "num_items_in_batch"}
    unknown = [key for key, value in output.items() if key not in known and value is not None]
    if rows and unknown:  # e.g. images: TRL's per-row inputs this module does not build
        raise ValueError(f"rollouts with branch rows cannot be trained with {unknown} in TRL's batch (multimodal"
                         " inputs); train a text-only model, or a harness that keeps one conversation")
    device = output["prompt_ids"].device
    pad_id = trl_internals.pad_token_id(trainer)
    filler = {"prompt_ids": [pad_id], "completion_ids": [pad_id], "logprobs": [0.0], "env_mask": [0]}
    extra = [row for _, row in rows] + [filler] * empty
    built = _tensors(trainer, extra, device, output)
    built["completion_mask"][len(rows):] = 0  # the fillers add nothing to the loss
    advantages = output["advantages"]
    built["advantages"] = torch.cat([advantages[[at for at, _ in rows]],
                                     advantages.new_zeros(empty)]) if rows else advantages.new_zeros(empty)
    merged = dict(output)
    for key, value in built.items():
        if key == "advantages" or key not in PADDED:
            merged[key] = torch.cat([output[key], value]) if key in output else value
            continue
        side, fill = PADDED[key]
        fill = pad_id if fill is None else fill
        merged[key] = _cat_padded(output[key], value, side, fill)
    loss_mask = merged["completion_mask"] * merged["tool_mask"] if "tool_mask" in merged else merged["completion_mask"]
    merged["num_items_in_batch"] = trainer.accelerator.gather(loss_mask.sum()).sum()
    return merged


def _tensors(trainer: Any, rows: list[dict[str, list[Any]]], device: Any, output: dict[str, Any]) -> dict[str, Any]:
    """The per-row tensors TRL's `_generate_and_score_completions` builds, for `rows`."""
    import torch

    pad_id = trl_internals.pad_token_id(trainer)

    def padded(key: str, value: Any, side: str, dtype: Any = None) -> Any:
        tensors = [torch.tensor(row[key], dtype=dtype) for row in rows]
        return pad(tensors, padding_value=value, padding_side=side).to(device)

    prompt_ids = padded("prompt_ids", pad_id, "left")
    prompt_mask = pad([torch.ones(len(row["prompt_ids"]), dtype=torch.long) for row in rows],
                      padding_value=0, padding_side="left").to(device)
    completion_ids = padded("completion_ids", pad_id, "right")
    completion_mask = pad([torch.ones(len(row["completion_ids"]), dtype=torch.long) for row in rows],
                          padding_value=0, padding_side="right").to(device)
    tool_mask = padded("env_mask", 1, "right")
    sampling = padded("logprobs", 0.0, "right", torch.float32)
    built: dict[str, Any] = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
                             "completion_mask": completion_mask}
    if "tool_mask" in output:
        built["tool_mask"] = tool_mask
    if "sampling_per_token_logps" in output:
        built["sampling_per_token_logps"] = sampling
    ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention = torch.cat([prompt_mask, completion_mask], dim=1)
    keep = completion_ids.size(1)
    batch_size = trainer.args.per_device_train_batch_size

    def logps(model: Any) -> Any:
        return trl_internals.score_rows(trainer, model, ids, attention, keep, batch_size)

    with torch.no_grad(), disable_gradient_checkpointing(trainer.model, trainer.args.gradient_checkpointing_kwargs):
        if "old_per_token_logps" in output:
            built["old_per_token_logps"] = logps(trainer.model)
        if "ref_per_token_logps" in output:
            if trainer.ref_model is not None:
                built["ref_per_token_logps"] = logps(trainer.ref_model)
            else:  # a PEFT adapter: the base (or the "ref" copy) is the reference, as TRL does it
                model = trainer.accelerator.unwrap_model(trainer.model)
                with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
                    built["ref_per_token_logps"] = logps(trainer.model)
    if "importance_sampling_ratio" in output:
        built["importance_sampling_ratio"] = _importance_ratio(trainer, built["old_per_token_logps"], sampling,
                                                               completion_mask * tool_mask)
    return built


def _importance_ratio(trainer: Any, old: Any, sampling: Any, mask: Any) -> Any:
    """TRL's off-policy ratio (`_generate_and_score_completions`), for these rows."""
    import torch

    diff = torch.nan_to_num((old - sampling) * mask, nan=0.0)
    mode, low, high = trl_internals.importance_sampling(trainer)
    if mode in ("sequence_mask", "sequence_truncate"):
        diff = diff.sum(dim=-1, keepdim=True)
    ratio = torch.exp(diff)
    if mode in ("sequence_truncate", "token_truncate"):
        return torch.clamp(ratio, min=low, max=high)
    low = -math.inf if low is None else low
    high = math.inf if high is None else high
    return ratio.masked_fill((ratio < low) | (ratio > high), 0.0)


def _cat_padded(a: Any, b: Any, side: str, fill: Any) -> Any:
    """Rows of `a` then rows of `b`, padded on `side` to the wider of the two."""
    import torch

    width = max(a.size(1), b.size(1))

    def widen(t: Any) -> Any:
        gap = width - t.size(1)
        if gap == 0:
            return t
        block = torch.full((t.size(0), gap), fill, dtype=t.dtype, device=t.device)
        return torch.cat([block, t] if side == "left" else [t, block], dim=1)

    return torch.cat([widen(a), widen(b)])
