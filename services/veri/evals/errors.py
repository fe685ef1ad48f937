"""What `veri eval` refuses: one line that says what to do (no traceback)."""

from __future__ import annotations


class EvalError(RuntimeError):
    """The eval cannot run, or its results cannot be trusted; the message names the fix."""
