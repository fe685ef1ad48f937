"""A model folder whose generation_config.json recommends its own sampling, as real checkpoints do
(Qwen3-4B-Instruct-2507 ships top_k 20, top_p 0.8, temperature 0.7): the copy the sampling-fidelity
tests serve, so a server that let those defaults apply would sample from another distribution than the
one the trainer scores (core/sampling.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

# Far from neutral on purpose: with them applied, the issue measured a ratio of 0.0011 and 6.82 nats per
# token between the trainer and vLLM at equal weights, measured before the fix.
HOSTILE = {"do_sample": True, "top_k": 3, "min_p": 0.1, "repetition_penalty": 1.5, "temperature": 0.6, "top_p": 0.8}


def with_generation_defaults(model: Path, out: Path, defaults: dict | None = None) -> Path:
    """A copy of `model` at `out` (replaced) whose generation_config.json adds `defaults` (HOSTILE)."""
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(model, out)
    path = out / "generation_config.json"
    config = json.loads(path.read_text()) if path.is_file() else {}
    path.write_text(json.dumps({**config, **(HOSTILE if defaults is None else defaults)}, indent=2))
    out.chmod(0o755)  # a container's user reads it (the stack's servers run as veri's uid)
    return out.resolve()
