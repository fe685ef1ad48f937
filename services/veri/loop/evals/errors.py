"""What `veri eval` refuses: one line that says what to do (no traceback)."""

from __future__ import annotations


class EvalError(RuntimeError):
    """The eval cannot run, or its results cannot be trusted; the message names the fix."""


def eval_failures() -> tuple[type[Exception], ...]:
    """What `veri eval` answers with one line (its own, the archive's, the services' and the config's)."""
    from veri.archive.errors import ArchiveError
    from veri.core.problems import ProblemsError
    from veri.infra.http import HttpCallError
    from veri.loop.collect.errors import StackError
    from veri.services.launcher.errors import LauncherError

    return (EvalError, ArchiveError, HttpCallError, ProblemsError, LauncherError, StackError)
