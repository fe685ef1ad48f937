"""Load a transformers model folder into what the engine and the API need (`LoadedModel`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import structlog
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache, PreTrainedModel, PreTrainedTokenizerBase
from transformers.cache_utils import DynamicLayer

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class LoadedModel:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    name: str
    max_model_len: int
    vocab_size: int
    # vLLM's stop rules: the tokenizer's eos stops every request (`stop_reason` None); the generation
    # config's other eos ids are added to each request's `stop_token_ids` (`stop_reason` = the id).
    eos_token_id: int | None
    generation_eos_ids: frozenset[int]


def load_model(model_dir: Path, *, name: str, dtype: str) -> LoadedModel:
    if not (model_dir / "config.json").exists():
        raise FileNotFoundError(f"{model_dir} is not a transformers model folder (no config.json)")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype))
    model.eval()
    model.requires_grad_(False)
    _check_full_attention(model)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    text_config = model.config.get_text_config()
    loaded = LoadedModel(
        model=model,
        tokenizer=tokenizer,
        name=name,
        max_model_len=int(text_config.max_position_embeddings),
        vocab_size=int(model.get_input_embeddings().weight.shape[0]),
        eos_token_id=tokenizer.eos_token_id,
        generation_eos_ids=frozenset(_as_ids(model.generation_config.eos_token_id)),
    )
    log.info(
        "model loaded",
        model_dir=str(model_dir),
        architecture=type(model).__name__,
        dtype=dtype,
        parameters=sum(p.numel() for p in model.parameters()),
        max_model_len=loaded.max_model_len,
        eos_token_id=loaded.eos_token_id,
        generation_eos_ids=sorted(loaded.generation_eos_ids),
    )
    return loaded


def _as_ids(value: int | list[int] | None) -> list[int]:
    if value is None:
        return []
    return [value] if isinstance(value, int) else list(value)


def _check_full_attention(model: PreTrainedModel) -> None:
    """The engine merges and trims left-padded KV caches, which is only right for full-attention layers."""
    layers = DynamicCache(config=model.config).layers
    other = sorted({type(layer).__name__ for layer in layers if type(layer) is not DynamicLayer})
    if other:
        raise ValueError(f"the hf backend serves full-attention models only; this model has {other} cache layers")
