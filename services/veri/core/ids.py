"""A rollout id: one constrained type that the proxy (sessions, `/r/<id>` URLs) and the launcher
(container and Job names, output folders) both accept. Letters, digits, `.`, `_`, `-`; 1-128
characters, starting with a letter or digit: safe in a URL path, a file name and a label value."""

from __future__ import annotations

from typing import Annotated

from pydantic import StringConstraints

ROLLOUT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
RolloutId = Annotated[str, StringConstraints(pattern=ROLLOUT_ID_PATTERN)]
