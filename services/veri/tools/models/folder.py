"""Write a model folder in one step, with the `veri.json` hint the capture proxy reads."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

HINT_FILE = "veri.json"


def write_model_folder(out: Path, renderer: str, fill: Callable[[Path], None]) -> Path:
    """Let `fill` write the model into a staging folder, add the hint, then swap it in at `out`.

    `renderer` names the `renderers` renderer for this model: renderers' auto-detection only knows hub
    model names, so the proxy reads it from `veri.json`. Staging keeps a crashed build from leaving a
    half-written folder behind; an existing `out` is replaced only if it is itself a veri model folder.
    """
    out = out.resolve()
    if out.exists() and any(out.iterdir()) and not (out / HINT_FILE).exists():
        raise FileExistsError(f"{out} is not empty and not a veri model folder: choose another --out")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        fill(staging)
        (staging / HINT_FILE).write_text(json.dumps({"renderer": renderer}) + "\n")
        # mkdtemp and safetensors create owner-only files; servers in containers may read as another user.
        staging.chmod(0o755)
        for path in staging.iterdir():
            path.chmod(0o644)
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out
