"""`GRPOTrainer` with veri's three additions: a rollout's branch rows, the off-policy figures measured over
every row (branch rows included) with the share of tokens whose correction was truncated, and rows
scored without the batch's padding.

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

from veri.services.trainer.grpo.branch_rows import add_branch_rows, branch_rows
from veri.services.trainer.grpo.ratio_metrics import TRUNCATED_METRIC, remeasure
from veri.services.trainer.grpo.unpad import score_unpadded

__all__ = ["BRANCH_METRIC", "TRUNCATED_METRIC", "veri_trainer_class"]

BRANCH_METRIC = "rows/branch_rows"  # rows trained besides the one per rollout in TRL's slot


@functools.cache
def veri_trainer_class() -> type:
    from trl import GRPOTrainer

    class VeriGRPOTrainer(GRPOTrainer):  # type: ignore[misc]
        def _get_per_token_logps_and_entropies(self, model: Any, input_ids: Any, attention_mask: Any,
                                               logits_to_keep: int, batch_size: int | None = None,
                                               compute_entropy: bool = False, compute_aux_loss: bool = False,
                                               **multimodal: Any) -> tuple[Any, Any, Any]:
            score = functools.partial(super()._get_per_token_logps_and_entropies, model,
                                      compute_entropy=compute_entropy, compute_aux_loss=compute_aux_loss)
            if any(value is not None for value in multimodal.values()):  # image inputs: TRL's own chunking
                return score(input_ids, attention_mask, logits_to_keep, batch_size, **multimodal)
            return score_unpadded(score, input_ids, attention_mask, logits_to_keep, batch_size)

        def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
            output: dict[str, Any] = super()._generate_and_score_completions(inputs)
            branches = branch_rows(inputs)
            output = add_branch_rows(self, output, branches)
            mode = "train" if self.model.training else "eval"
            self._metrics[mode][BRANCH_METRIC].append(float(len(branches)))
            remeasure(self, output, mode)  # TRL measured its own rows only, before the branch rows
            return output

    return VeriGRPOTrainer
