"""The policy's weights as the policy server loads them, written atomically; the final model folder.

`policy_state_dict` gives the weights under the base model's own state-dict names: with LoRA, each
adapted layer's weight is W + its LoRA delta (computed, not merged in place, so the frozen base
weights never drift), and adapter tensors are left out. Tied tensors (a tied lm_head) appear once.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import torch
from peft import PeftModel
from peft.tuners.lora import LoraLayer
from safetensors.torch import save_file

WEIGHTS_FILE = "model.safetensors"


def policy_state_dict(model: Any) -> dict[str, torch.Tensor]:
    state = _merged_lora_state(model) if isinstance(model, PeftModel) else dict(model.state_dict())
    return _untied(state)


def write_weights(folder: Path, name: str, tensors: dict[str, torch.Tensor]) -> Path:
    """`folder/name/model.safetensors`, written under a temporary name and renamed into place."""
    final, scratch = folder / name, folder / f".{name}.tmp"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    save_file({key: value.detach().to("cpu").contiguous() for key, value in tensors.items()},
              str(scratch / WEIGHTS_FILE), metadata={"format": "pt"})
    if final.exists():
        shutil.rmtree(final)
    os.replace(scratch, final)
    return final


def write_step_weights(folder: Path, step: int, model: Any) -> Path:
    """The policy's weights after `step` optimizer steps, as `folder/step-<k>/model.safetensors`."""
    return write_weights(folder, f"step-{step:06d}", policy_state_dict(model))


def drop_other_steps(folder: Path, keep: Path) -> None:
    """Every `folder/step-*` but `keep`: once the policy servers hold a step's weights, older files serve nobody."""
    for old in folder.glob("step-*"):
        if old != keep:
            shutil.rmtree(old, ignore_errors=True)


def save_final_model(model: Any, tokenizer: Any, folder: Path) -> Path:
    """A plain transformers folder (LoRA merged in), with the tokenizer and chat template."""
    final = model.merge_and_unload() if isinstance(model, PeftModel) else model
    final.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@torch.no_grad()
def _merged_lora_state(model: PeftModel) -> dict[str, torch.Tensor]:
    base = model.get_base_model()
    adapter = model.active_adapter
    deltas = {
        # Every concrete LoraLayer (Linear, Embedding, Conv*) defines get_delta_weight; the base class does not.
        f"{name}.weight": module.get_delta_weight(adapter)  # type: ignore[attr-defined]
        for name, module in base.named_modules()
        if isinstance(module, LoraLayer) and adapter in module.lora_A
    }
    state = {}
    for key, tensor in base.state_dict().items():
        if ".lora_" in key:
            continue
        name = key.replace(".base_layer.", ".")
        state[name] = tensor + deltas[name].to(tensor.dtype) if name in deltas else tensor
    return state


def _untied(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """One name per shared storage (safetensors refuses aliases; the server accepts either name)."""
    seen: set[tuple[int, int]] = set()
    kept = {}
    for name, tensor in state.items():
        key = (tensor.untyped_storage().data_ptr(), int(tensor.storage_offset()))
        if key in seen:
            continue
        seen.add(key)
        kept[name] = tensor
    return kept
