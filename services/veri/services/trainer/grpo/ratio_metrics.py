"""The off-policy figures of a step, over every row TRL trains: its own rows and veri's branch rows.

TRL 1.16 logs, per generation batch, how far the trainer's logprobs are from the sampler's and the
importance ratio it weighs each token by:

    sampling/sampling_logp_difference/mean|max     |trainer - sampler| logprob per trained token
    sampling/importance_sampling_ratio/min|mean|max   the ratio (after its cap), per trained token
                                                      (per row in the sequence_* modes)

It computes them inside `_generate_and_score_completions`, over the rows it built, before
`grpo.branch_rows` appends sub-agent, side-call and compaction rows: those tokens were never measured.
`remeasure` computes the same figures the same way (mask, NaN handling, gathering across processes)
over the merged batch and puts them in place of TRL's; veri adds

    sampling/importance_sampling_ratio/truncated_frac   trained tokens whose ratio reached the cap
                                                        (token_truncate): too many says
                                                        importance_sampling_cap or max_staleness is tight

TRL-private (through `grpo.trl_internals`): the trainer's logged figures (a list per name, one value
appended per generation batch) and its importance-sampling settings.
"""

from __future__ import annotations

from typing import Any

from veri.services.trainer.grpo import trl_internals
from veri.services.trainer.grpo.trl_internals import nanmax, nanmin

DIFFERENCE = "sampling/sampling_logp_difference"
RATIO = "sampling/importance_sampling_ratio"
TRUNCATED_METRIC = f"{RATIO}/truncated_frac"


def remeasure(trainer: Any, output: dict[str, Any], mode: str) -> None:
    """Replace TRL's figures for this batch (the last value of each list) with the same figures over every
    row of `output`; add the truncated share. Nothing to do when TRL ran no off-policy correction."""
    ratio = output.get("importance_sampling_ratio")
    if ratio is None or "old_per_token_logps" not in output or "sampling_per_token_logps" not in output:
        return
    figures = _figures(trainer, output, ratio)
    metrics = trl_internals.metrics(trainer, mode)
    for name, value in figures.items():
        if name == TRUNCATED_METRIC:
            metrics[name].append(value)
        else:  # TRL appended its own (its rows only) for this batch a moment ago
            metrics[name][-1] = value


def _figures(trainer: Any, output: dict[str, Any], ratio: Any) -> dict[str, float]:
    import torch

    gather = trainer.accelerator.gather
    mask = output["completion_mask"]
    if output.get("tool_mask") is not None:
        mask = mask * output["tool_mask"]
    trained = mask.bool()
    zero = torch.tensor(0.0, device=mask.device)

    delta = torch.abs(output["old_per_token_logps"] - output["sampling_per_token_logps"])
    delta = delta[trained & ~torch.isnan(delta)]  # a token the sampler could not score carries NaN
    mode, _, cap = trl_internals.importance_sampling(trainer)
    sequence_level = mode in ("sequence_mask", "sequence_truncate")
    flat = ratio.flatten() if sequence_level else ratio[trained]

    def of(values: Any, reduce: Any) -> Any:
        return reduce(values) if values.numel() > 0 else zero

    figures = {
        f"{DIFFERENCE}/mean": gather(of(delta, torch.mean)).mean().item(),
        f"{DIFFERENCE}/max": gather(of(delta, torch.max)).max().item(),
        f"{RATIO}/min": nanmin(gather(of(flat, torch.min))).item(),
        f"{RATIO}/mean": gather(of(flat, torch.mean)).nanmean().item(),
        f"{RATIO}/max": nanmax(gather(of(flat, torch.max))).item(),
    }
    if cap is not None and mode == "token_truncate":
        figures[TRUNCATED_METRIC] = float(((ratio >= cap) * mask).sum() / mask.sum().clamp(min=1))
    return figures
