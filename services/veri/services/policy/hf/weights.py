"""`POST /update_weights`: read a safetensors file (or a folder of shards), check it against the live
model, and copy it in. Reading and checking happen off the engine thread; only `apply_update` runs on
it, between decode steps with no rows in flight, so a completion is never sampled from mixed weights.

The update must name every tensor of the model's state dict (tied tensors, such as a tied lm_head, may
appear under either name, as `save_pretrained` writes them, or under both with equal values) and
nothing else, with the same shapes and finite values. Anything else is rejected with a message naming
the tensors, and the old weights stay.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from transformers import PreTrainedModel

from veri.services.policy.hf.errors import WeightUpdateRejected

_SHOWN = 5  # names listed in an error message before "..."


@dataclass(frozen=True)
class WeightUpdate:
    source: str
    tensors: dict[str, torch.Tensor]  # state-dict name -> tensor, already in the parameter's dtype
    version: int | None = None  # the version the trainer names (its step); None: current + 1


def read_update(path: Path, model: PreTrainedModel) -> WeightUpdate:
    tensors = _read_tensors(_safetensors_files(path))
    targets = model.state_dict()
    groups = _tied_groups(targets)
    unknown = sorted(set(tensors) - set(targets))
    if unknown:
        raise WeightUpdateRejected(f"{path}: tensors the model does not have: {_names(unknown)}", param="path")
    missing = sorted(names[0] for names in groups if not any(n in tensors for n in names))
    if missing:
        raise WeightUpdateRejected(f"{path}: tensors missing from the update: {_names(missing)}", param="path")
    update: dict[str, torch.Tensor] = {}
    for name, tensor in tensors.items():
        target = targets[name]
        if tensor.shape != target.shape:
            raise WeightUpdateRejected(
                f"{path}: {name} has shape {list(tensor.shape)}, the model's is {list(target.shape)}", param="path"
            )
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise WeightUpdateRejected(f"{path}: {name} has non-finite values", param="path")
        update[name] = tensor.to(target.dtype)
    for names in groups:
        given = [n for n in names if n in tensors]
        if any(not torch.equal(tensors[given[0]], tensors[n]) for n in given[1:]):
            raise WeightUpdateRejected(f"{path}: tied tensors {', '.join(given)} differ", param="path")
    return WeightUpdate(source=str(path), tensors=update)


@torch.no_grad()
def apply_update(model: PreTrainedModel, update: WeightUpdate) -> None:
    targets = model.state_dict()
    for name, tensor in update.tensors.items():
        targets[name].copy_(tensor)


def _safetensors_files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(path.glob("*.safetensors"))
        if not files:
            raise WeightUpdateRejected(f"{path}: the folder holds no *.safetensors file", param="path")
        return files
    if not path.is_file():
        raise WeightUpdateRejected(f"{path}: no such file or folder", param="path")
    if path.suffix != ".safetensors":
        raise WeightUpdateRejected(f"{path}: not a .safetensors file", param="path")
    return [path]


def _read_tensors(files: list[Path]) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            with safe_open(file, framework="pt") as f:
                for name in f.keys():
                    if name in tensors:
                        raise WeightUpdateRejected(f"{file}: {name} appears in more than one file", param="path")
                    tensors[name] = f.get_tensor(name)
        except (SafetensorError, OSError) as exc:
            raise WeightUpdateRejected(f"{file}: not a readable safetensors file ({exc})", param="path") from exc
    return tensors


def _tied_groups(state: dict[str, torch.Tensor]) -> list[list[str]]:
    """State-dict names grouped by the storage they share (a tied lm_head and embedding are one group)."""
    by_storage: dict[int, list[str]] = defaultdict(list)
    for name, tensor in state.items():
        by_storage[tensor.untyped_storage().data_ptr()].append(name)
    return list(by_storage.values())


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:_SHOWN])
    return shown + (f" ... ({len(names)} in all)" if len(names) > _SHOWN else "")
