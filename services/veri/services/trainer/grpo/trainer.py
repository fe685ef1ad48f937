"""`GRPOTrainer` with veri's three additions: a rollout's branch rows, the off-policy figures measured over
every row (branch rows included) with the share of tokens whose correction was truncated, and rows
scored without the batch's padding. The TRL methods it hooks are `grpo.trl_internals`'.

A rollout whose history is a tree has several rows; TRL's batch gets the one ending at the final answer,
and `grpo.branch_rows` appends the others with their rollout's advantage once TRL has built it. Those rows
differ in length, so each chunk the model scores is first cut to the columns its rows use (`grpo.unpad`).

TRL computes the per-token importance ratio (trainer / sampler probability, `vllm_importance_sampling_*`)
and logs its min/mean/max and the logprob difference, over its own rows only; `grpo.ratio_metrics`
measures them again over the merged batch, with how often the ratio reached the cap (`token_truncate`),
which says whether `importance_sampling_cap` or `max_staleness` is too tight. The loss, the ratio and
the advantages stay TRL's.
"""

from __future__ import annotations

import functools
from typing import Any

from veri.services.trainer.grpo import trl_internals
from veri.services.trainer.grpo.branch_rows import add_branch_rows, branch_rows
from veri.services.trainer.grpo.ratio_metrics import TRUNCATED_METRIC, remeasure
from veri.services.trainer.grpo.unpad import score_unpadded

__all__ = ["BRANCH_METRIC", "TRUNCATED_METRIC", "veri_trainer_class"]

BRANCH_METRIC = "rows/branch_rows"  # rows trained besides the one per rollout in TRL's slot


@functools.cache
def veri_trainer_class() -> type:
    return trl_internals.subclass(score_chunks=score_unpadded, after_generation=_after_generation)


def _after_generation(trainer: Any, inputs: list[dict[str, Any]], output: dict[str, Any]) -> dict[str, Any]:
    """TRL's generation batch with the branch rows appended and the off-policy figures over every row."""
    branches = branch_rows(inputs)
    output = add_branch_rows(trainer, output, branches)
    mode = "train" if trainer.model.training else "eval"
    trl_internals.metrics(trainer, mode)[BRANCH_METRIC].append(float(len(branches)))
    remeasure(trainer, output, mode)  # TRL measured its own rows only, before the branch rows
    return output
