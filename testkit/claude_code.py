"""Where the host's Claude Code binary is: $VERI_CLAUDE_BIN (make test sets it), else `make claude-code`'s."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def claude_binary() -> Path:
    if os.environ.get("VERI_CLAUDE_BIN"):
        path = Path(os.environ["VERI_CLAUDE_BIN"])
    else:
        built = sorted((REPO / "build/claude-code").glob("*/claude"))
        path = built[-1] if built else REPO / "build/claude-code/<version>/claude"
    assert path.exists(), f"Claude Code not installed at {path}: run `make claude-code`"
    return path.resolve()
