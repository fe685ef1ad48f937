"""Every use veri makes of TRL's private API, in this one module: upgrading TRL is a change here.

TRL's `GRPOTrainer` has no public hooks for what veri adds (a rollout's branch rows, rows scored without
the batch's padding, weights pushed by veri's own sync, the off-policy figures over every row), so veri
overrides two private methods, reads and sets private attributes and calls helpers from TRL's private
modules. Each is listed in `INTERNALS`: what it is, why veri needs it, and which upstream hook would
remove it. `RECORDED` holds the signatures they had in the TRL veri was written against (`RECORDED_TRL`);
tests/trainer/test_trl_internals.py fails, naming the method and both versions, when the installed
TRL's differ, and checks that GRPOTrainer still sets the attributes read here. On an upgrade: run it,
fix what it names here (and in the modules that call these functions), re-record.

Everything else in veri talks to TRL through its public API (`GRPOConfig`, `GRPOTrainer(...)`,
`rollout_func`, callbacks). The batch `_generate_and_score_completions` returns is a dict whose keys
(`completion_mask`, `old_per_token_logps`, ...) `grpo.branch_rows` and `grpo.ratio_metrics` extend; its
layout is part of that method's contract, checked by tests/trainer/test_branch_rows.py on the real TRL.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

__all__ = [
    "INTERNALS", "RECORDED", "RECORDED_TRL", "AfterGeneration", "ScoreChunks", "disable_gradient_checkpointing",
    "generation_batch",
    "importance_sampling", "metrics", "nanmax", "nanmin", "pad", "pad_token_id", "score_rows",
    "seat_weight_sync", "signature_drift", "subclass", "sync_weights_now", "use_adapter", "weight_sync",
    "set_weight_sync", "missing_attributes",
]

RECORDED_TRL = "1.16.0"


@dataclass(frozen=True)
class Internal:
    name: str  # where it lives in TRL
    why: str  # what veri does with it
    upstream: str  # the TRL hook that would make it unnecessary


INTERNALS = (
    Internal("trl.GRPOTrainer._get_per_token_logps_and_entropies",
             "overridden (`subclass`) to score each chunk cut to the columns its rows use (grpo.unpad), and "
             "called for branch rows' logprobs (`score_rows`)",
             "a scoring hook, or TRL cutting padding per chunk itself"),
    Internal("trl.GRPOTrainer._generate_and_score_completions",
             "overridden (`subclass`) to append a rollout's branch rows after TRL built the batch and its "
             "advantages, and to measure the off-policy figures over every row; called by "
             "bench/sampling_fidelity.py for a batch without a step (`generation_batch`)",
             "a post-batch hook (batch -> batch) before the loss, or multi-row rollouts from rollout_func"),
    Internal("trl.GRPOTrainer._metrics",
             "the per-mode lists of logged figures: veri appends rows/branch_rows and replaces TRL's ratio "
             "figures with ones over every row (`metrics`)",
             "a public `log_metric(mode, name, value)`"),
    Internal("trl.GRPOTrainer._last_loaded_step",
             "reset so veri's own weight sync runs at the next step, and moved by an eval that synced first "
             "(`seat_weight_sync`, `sync_weights_now`)",
             "a pluggable weight-sync client (server mode without TRL's VLLMClient)"),
    Internal("trl.GRPOTrainer.vllm_generation / use_vllm",
             "the object TRL calls sync_weights() on: veri seats its own sync there and wraps it "
             "(`weight_sync`, `set_weight_sync`, `seat_weight_sync`)",
             "a pluggable weight-sync client"),
    Internal("trl.GRPOTrainer._tokenizer",
             "the pad id branch rows are padded with (`pad_token_id`)",
             "the processing class's pad id exposed, or multi-row rollouts"),
    Internal("trl.GRPOTrainer.vllm_importance_sampling_mode / vllm_importance_sampling_clip_min / "
             "vllm_importance_sampling_clip_max",
             "the off-policy ratio computed again for branch rows, as TRL does (`importance_sampling`)",
             "a public ratio function, or multi-row rollouts"),
    Internal("trl.trainer.utils.pad / use_adapter / nanmax / nanmin, trl.models.utils.disable_gradient_checkpointing",
             "branch rows' tensors and ratio figures built exactly as TRL builds its own",
             "these helpers made public"),
    Internal("trl.GRPOTrainer._compute_loss",
             "its source is read by tests/trainer/test_grpo_config.py: every loss type TRL knows has veri's note",
             "a public table of loss types and their normalisation"),
)

# The installed TRL's signatures (annotations left out: they name torch and transformers types) as of
# RECORDED_TRL, by the name `signature_drift` looks them up with.
RECORDED = {
    "GRPOTrainer._get_per_token_logps_and_entropies":
        "(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, compute_entropy=False, "
        "compute_aux_loss=False, pixel_values=None, image_grid_thw=None, num_images=None, "
        "pixel_attention_mask=None, spatial_shapes=None, num_tiles=None, image_sizes=None, token_type_ids=None, "
        "mm_token_type_ids=None, image_position_ids=None)",
    "GRPOTrainer._generate_and_score_completions": "(self, inputs)",
    "GRPOTrainer._compute_loss": "(self, model, inputs)",
    "trl.trainer.utils.pad": "(tensors, padding_value=0, padding_side='right', pad_to_multiple_of=None)",
    "trl.trainer.utils.use_adapter": "(model, adapter_name)",
    "trl.trainer.utils.nanmax": "(tensor)",
    "trl.trainer.utils.nanmin": "(tensor)",
    "trl.models.utils.disable_gradient_checkpointing": "(model, gradient_checkpointing_kwargs=None)",
}
# What GRPOTrainer's own code assigns (`self.<name> =`) that veri reads or sets on it.
ATTRIBUTES = ("_metrics", "_last_loaded_step", "_tokenizer", "vllm_generation", "use_vllm",
              "vllm_importance_sampling_mode", "vllm_importance_sampling_clip_min",
              "vllm_importance_sampling_clip_max")

# (input_ids, attention_mask, logits_to_keep) -> (logps, entropies, aux loss): TRL's scoring of one chunk
Score = Callable[[Any, Any, int], tuple[Any, Any, Any]]
# (TRL's scoring, input_ids, attention_mask, logits_to_keep, batch_size) -> what TRL's method returns
ScoreChunks = Callable[[Callable[..., tuple[Any, Any, Any]], Any, Any, int, "int | None"], tuple[Any, Any, Any]]
# (trainer, TRL's inputs, TRL's batch) -> the batch the loss trains on
AfterGeneration = Callable[[Any, list[dict[str, Any]], dict[str, Any]], dict[str, Any]]


def subclass(*, score_chunks: ScoreChunks, after_generation: AfterGeneration) -> type:
    """GRPOTrainer with its text-only scoring done by `score_chunks` and its generation batch passed through
    `after_generation` before the loss sees it."""
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
            return score_chunks(score, input_ids, attention_mask, logits_to_keep, batch_size)

        def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
            return after_generation(self, inputs, super()._generate_and_score_completions(inputs))

    return VeriGRPOTrainer


def score_rows(trainer: Any, model: Any, ids: Any, attention: Any, keep: int, batch_size: int) -> Any:
    """The per-token logprobs of these rows, scored the way the trainer scores its own."""
    logps, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, attention, keep, batch_size=batch_size)
    return logps


def generation_batch(trainer: Any, inputs: list[dict[str, Any]]) -> dict[str, Any]:
    """The batch the loss would train on for `inputs`: rollouts run, scored, advantages (bench/sampling_fidelity.py)."""
    batch: dict[str, Any] = trainer._generate_and_score_completions(inputs)
    return batch


def metrics(trainer: Any, mode: str) -> Any:
    """The trainer's logged figures for `mode` ("train" or "eval"): a list per name, one value per batch."""
    return trainer._metrics[mode]


def pad_token_id(trainer: Any) -> int:
    return int(trainer._tokenizer.pad_token_id)


def importance_sampling(trainer: Any) -> tuple[str, float | None, float | None]:
    """(mode, clip min, clip max) of the trainer's off-policy correction."""
    return (trainer.vllm_importance_sampling_mode, trainer.vllm_importance_sampling_clip_min,
            trainer.vllm_importance_sampling_clip_max)


def weight_sync(trainer: Any) -> Any:
    """What TRL's loop calls `sync_weights()` on before a step whose weights changed."""
    return trainer.vllm_generation


def set_weight_sync(trainer: Any, sync: Any) -> None:
    trainer.vllm_generation = sync


def seat_weight_sync(trainer: Any, sync: Any) -> None:
    """Turn TRL's server-mode steps on for a trainer built without TRL's vLLM client, with `sync` as its
    client: TRL gates them on `use_vllm` and calls `vllm_generation.sync_weights()` when `global_step`
    moved past `_last_loaded_step` (in `_generate_and_score_completions`)."""
    trainer.use_vllm = True
    trainer.vllm_generation = sync
    trainer._last_loaded_step = -1


def sync_weights_now(trainer: Any) -> None:
    """The weights to the policy now, as TRL does before its next generation (which then skips it)."""
    if trainer.state.global_step != trainer._last_loaded_step:
        trainer.vllm_generation.sync_weights()
        trainer._last_loaded_step = trainer.state.global_step


# TRL's private helpers, imported when called (TRL imports torch).
def pad(tensors: list[Any], padding_value: Any = 0, padding_side: str = "right") -> Any:
    from trl.trainer.utils import pad as trl_pad

    return trl_pad(tensors, padding_value=padding_value, padding_side=padding_side)


@contextmanager
def use_adapter(model: Any, adapter_name: str | None) -> Iterator[None]:
    from trl.trainer.utils import use_adapter as trl_use_adapter

    with trl_use_adapter(model, adapter_name=adapter_name):
        yield


@contextmanager
def disable_gradient_checkpointing(model: Any, gradient_checkpointing_kwargs: dict[str, Any] | None) -> Iterator[None]:
    from trl.models.utils import disable_gradient_checkpointing as trl_disable

    with trl_disable(model, gradient_checkpointing_kwargs):
        yield


def nanmax(tensor: Any) -> Any:
    from trl.trainer.utils import nanmax as trl_nanmax

    return trl_nanmax(tensor)


def nanmin(tensor: Any) -> Any:
    from trl.trainer.utils import nanmin as trl_nanmin

    return trl_nanmin(tensor)


def installed_signature(name: str) -> str:
    """The installed TRL's signature of `name` (a key of RECORDED), without annotations."""
    import importlib

    import trl

    if name.startswith("GRPOTrainer."):
        target = getattr(trl.GRPOTrainer, name.split(".", 1)[1])
    else:
        module, attribute = name.rsplit(".", 1)
        target = getattr(importlib.import_module(module), attribute)
    signature = inspect.signature(inspect.unwrap(target))
    bare = [parameter.replace(annotation=inspect.Parameter.empty) for parameter in signature.parameters.values()]
    return str(signature.replace(parameters=bare, return_annotation=inspect.Signature.empty))


def signature_drift() -> list[str]:
    """One line per private TRL function whose installed signature differs from the recorded one."""
    import trl

    drift = []
    for name, recorded in RECORDED.items():
        try:
            found = installed_signature(name)
        except (AttributeError, ImportError) as error:
            found = f"missing ({error})"
        if found != recorded:
            drift.append(f"{name}: TRL {trl.__version__} has {found}, veri was written against TRL {RECORDED_TRL}'s "
                         f"{recorded} (services/veri/services/trainer/grpo/trl_internals.py)")
    return drift


def missing_attributes() -> list[str]:
    """The attributes of ATTRIBUTES the installed GRPOTrainer's code no longer assigns."""
    import trl

    source = inspect.getsource(trl.GRPOTrainer)
    return [name for name in ATTRIBUTES if f"self.{name} =" not in source]
