"""Cap what a harness leaves in VERI_OUTPUT_DIR: files are kept in name order until the cap."""

from __future__ import annotations

from pathlib import Path


def enforce_output_cap(folder: Path, max_bytes: int) -> bool:
    """Delete files past the cap (and any symlink); True when something was dropped."""
    kept, dropped = 0, False
    for path in sorted(p for p in folder.rglob("*") if p.is_file() or p.is_symlink()):
        size = 0 if path.is_symlink() else path.stat().st_size
        if path.is_symlink() or kept + size > max_bytes:
            path.unlink()
            dropped = True
        else:
            kept += size
    return dropped
