"""A PATH on which some of this machine's tools are missing, as on a machine that never installed them: one folder
of links to everything on the current PATH but those (tests/core/test_collection.py, test_host_packages.py)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def path_without(hidden: set[str], folder: Path) -> str:
    """A PATH of one folder holding links to everything on this PATH but `hidden` (and the checkout's .venv/bin)."""
    folder.mkdir()
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if not entry or not Path(entry).is_dir() or Path(entry).resolve() == (REPO / ".venv/bin").resolve():
            continue
        for tool in Path(entry).iterdir():
            link = folder / tool.name
            if tool.name not in hidden and not link.exists() and os.access(tool, os.X_OK) and not tool.is_dir():
                link.symlink_to(tool)
    return str(folder)
