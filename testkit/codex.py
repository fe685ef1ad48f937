"""Where the host's Codex CLI binary is: $VERI_CODEX_BIN (make test sets it), else `make codex`'s."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def codex_binary() -> Path:
    if os.environ.get("VERI_CODEX_BIN"):
        path = Path(os.environ["VERI_CODEX_BIN"])
    else:
        built = sorted((REPO / "build/codex").glob("*/codex"))
        path = built[-1] if built else REPO / "build/codex/<version>/codex"
    assert path.exists(), f"the Codex CLI is not installed at {path}: run `make codex`"
    return path.resolve()
