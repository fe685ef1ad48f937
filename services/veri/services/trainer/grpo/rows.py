"""Scored rollout records -> the dict TRL 1.16's `rollout_func` returns, one entry per record, in order.

    prompt_ids       the row's first prompt
    completion_ids   sampled tokens + the bridged environment tokens between turns (`core.episodes`)
    logprobs         the sampled logprobs; 0.0 on environment tokens
    env_mask         1 on sampled tokens, 0 on environment tokens. TRL pops `env_mask` and uses it as its
                     `tool_mask`: loss mask = completion_mask * tool_mask (grpo_trainer.py `_generate`,
                     "Support custom env_mask from rollout_func"; `_compute_loss`)
    veri_rewards     per record, each reward function's value, or None for every function when the
                     record is not trainable. TRL forwards extra keys to its reward functions (`grpo.rewards`)
    veri_branch_rows per record, its other rows (`Episode.branches`: sub-agents, side calls, the history
                     before a compaction), [] when it has none or is not trainable; appended to TRL's batch
                     with the record's advantage (`grpo.branch_rows`)

The row in TRL's slot is the one that ends at the final answer (`Episode.row`).

A rollout masked by `completion_truncated` (the job's `mask_truncated_completions`, applied per rollout
by the rollout function instead of TRL's per-row check) gets the placeholder row and no branch rows, but
keeps its rewards: it adds nothing to the loss and still counts in its group's baseline, as TRL does it.

A record that is not trainable (rejected by a rule, or unscored) is *masked*: it gets a one-token
placeholder row whose env_mask is 0, so it adds nothing to the loss, and None from every reward
function, which TRL treats as unscorable: NaN reward, left out of its group's nanmean/nanstd
baseline, advantage forced to 0 (`_generate_and_score_completions`, "unscorable_mask"). Its group's
surviving members thus get exactly the advantages they would get without it, and with TRL's
default loss (dapo, normalized by the batch's loss-mask tokens) the same loss and gradient too.
(With loss_type grpo or luspo, TRL averages per-sequence losses over the batch, masked rows
included, which scales the step down, as TRL's own masked truncated completions do.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from veri.core.episodes import TrainingRow
from veri.core.rollout_record import RolloutRecord
from veri.services.trainer.grpo.branch_rows import BRANCH_ROWS_FIELD

REWARDS_FIELD = "veri_rewards"


@dataclass(frozen=True)
class MaskedRow:
    """Token ids for a masked record's placeholder row (the tokenizer's pad and eos)."""

    pad_id: int
    eos_id: int

    def row(self) -> TrainingRow:
        # Ends with EOS, so TRL does not count it as a clipped completion.
        return TrainingRow(prompt_ids=[self.pad_id], completion_ids=[self.eos_id], logprobs=[0.0], env_mask=[0])


def rollout_output(records: list[RolloutRecord], masked: MaskedRow, reward_names: list[str]) -> dict[str, list[Any]]:
    output: dict[str, list[Any]] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [],
                                    REWARDS_FIELD: [], BRANCH_ROWS_FIELD: []}
    for record in records:
        trainable = record.trainable
        row = record.episode.row if trainable and record.episode.row is not None else masked.row()
        output["prompt_ids"].append(list(row.prompt_ids))
        output["completion_ids"].append(list(row.completion_ids))
        output["logprobs"].append(list(row.logprobs))
        output["env_mask"].append(list(row.env_mask))
        # `completion_truncated` (mask_truncated_completions) masks the rows, not the reward: as with TRL's own
        # flag, the rollout's reward still counts in its group's baseline.
        values = record.reward.per_function if record.rewarded and record.reward is not None else {}
        output[REWARDS_FIELD].append({name: values.get(name) for name in reward_names})
        branches = [b.row for b in record.episode.branches if b.row is not None] if trainable else []
        output[BRANCH_ROWS_FIELD].append([branch.model_dump() for branch in branches])
    return output
