"""What `veri export sft` and `veri sft` refuse: one line that says what to do (no traceback)."""

from __future__ import annotations


class ExportError(RuntimeError):
    """The export or the fine-tune cannot run as asked; the message names the fix."""
