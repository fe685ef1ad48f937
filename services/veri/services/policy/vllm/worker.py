"""veri's vLLM worker extension:
`vllm serve --worker-extension-cls veri.services.policy.vllm.worker.WeightReloadExtension`.

The `filesystem` weight sync (services/trainer/weights/vllm_sync.py) calls it through vLLM's dev route
`POST /collective_rpc {"method": "veri_reload_weights", "args": [folder]}` on every worker:

    veri_reload_weights(folder)  vLLM's own `reload_weights(weights_path=folder)` (layerwise: checkpoint
                                 names, each layer's post-load processing), then every module that
                                 shares a parameter with another made to follow it again; answers
                                 the folder's fingerprint and what it re-tied.
    veri_loaded_weights()        the folder and fingerprint this worker last loaded; None since it
                                 started (it serves the model folder's weights: a restarted server)
    veri_server_process()        {"id", "started_at"}: an id this worker process made when it started,
                                 and when; another id than before means the server restarted, whichever
                                 sync (filesystem or TRL's NCCL) loaded it (services/trainer/weights/served.py)

Why: a tied lm_head (`ParallelLMHead.tie_weights`: lm_head.weight *is* embed_tokens.weight) is not
in the checkpoint, so vLLM 0.31's layerwise reload loads and processes only embed_tokens ("tied
parameters will only reflect processing from one of the parent layers", its docstring). On the CPU
build the processing is where the GEMM is prepared (`dispatch_cpu_unquantized_gemm`: a oneDNN handle
or packed copy of the weight in `layer.cpu_linear`), so lm_head kept computing logits with the old
weight: served logprobs came from the new body and the old head (measured: 0.71 nats off after one
sync, 1e-6 once fixed). Each module that shared a parameter before the reload gets the parameter of
the first name again (the one the checkpoint holds: module order puts embed_tokens before lm_head)
and its own post-load processing run again.

Runs inside vLLM's worker processes: imports only the standard library and torch.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from pathlib import Path
from typing import Any

import torch

# This worker process, from when vLLM imported the extension (before it loaded the model's weights).
PROCESS = {"id": uuid.uuid4().hex, "started_at": time.time()}


class WeightReloadExtension:
    """Mixed into vLLM's worker class: `self.model_runner` is the worker's model runner."""

    model_runner: Any

    def veri_reload_weights(self, folder: str) -> dict[str, Any]:
        model = self.model_runner.get_model()
        ties = shared_parameters(model)
        self.model_runner.reload_weights(weights_path=folder)
        retied = tie_again(model, ties)
        loaded = {"folder": folder, "fingerprint": fingerprint(Path(folder))}
        self._veri_loaded = loaded
        return {**loaded, "retied": retied}

    def veri_loaded_weights(self) -> dict[str, Any] | None:
        return getattr(self, "_veri_loaded", None)

    def veri_server_process(self) -> dict[str, Any]:
        return dict(PROCESS)


def shared_parameters(model: torch.nn.Module) -> list[list[str]]:
    """Groups of parameter names that are one tensor (in module order; groups of two or more)."""
    by_tensor: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        by_tensor.setdefault(id(param), []).append(name)
    return [names for names in by_tensor.values() if len(names) > 1]


def tie_again(model: torch.nn.Module, groups: list[list[str]]) -> list[str]:
    """Point every later name of each group at the first name's (reloaded) parameter and redo its
    module's post-load processing; returns the names it did that for."""
    retied = []
    for first, *others in groups:
        source = model.get_parameter(first)
        for name in others:
            owner_name, _, attribute = name.rpartition(".")
            owner = model.get_submodule(owner_name)
            setattr(owner, attribute, source)
            method = getattr(owner, "quant_method", None)  # vLLM layers carry one; plain modules do not
            if method is not None:
                method.process_weights_after_loading(owner)
            retied.append(name)
    return retied


def fingerprint(folder: Path) -> str:
    """sha256 over the folder's safetensors files (names and sizes: cheap, and enough to tell steps apart)."""
    digest = hashlib.sha256()
    for file in sorted(folder.glob("*.safetensors")):
        digest.update(f"{file.name}:{file.stat().st_size}:{file.stat().st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]
