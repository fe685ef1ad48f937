"""How the docker backend waits out a dockerd that does not answer (stopped or restarting: live-restore
keeps the sandboxes running meanwhile): tenacity's policy for one docker call, and one log line each way."""

from __future__ import annotations

import time
from typing import Any

import structlog
from requests.exceptions import ChunkedEncodingError
from requests.exceptions import ConnectionError as RequestsConnectionError
from tenacity import RetryCallState, retry_if_exception_type, stop_never, wait_exponential

from veri.services.launcher.errors import DockerdAway

log = structlog.get_logger("veri.services.launcher.docker")

DOCKERD_GRACE_S = 120.0  # how long one docker call waits out a dockerd that does not answer
RETRY_FIRST_S, RETRY_MAX_S = 0.5, 5.0  # backoff between its tries
# dockerd not there (refused, no socket) or gone mid-answer (a long `wait` cut by its stop)
NO_ANSWER = (RequestsConnectionError, ChunkedEncodingError)


class DockerdWatch:
    def __init__(self, grace_s: float = DOCKERD_GRACE_S) -> None:
        self.grace_s = grace_s
        self._away_since: float | None = None  # dockerd stopped answering then (for one log line each way)

    def policy(self) -> dict[str, Any]:
        """tenacity's policy for one docker call: tried again on NO_ANSWER only, RETRY_FIRST_S after the
        first miss, doubling up to RETRY_MAX_S; DockerdAway once grace_s have passed since the first miss.
        Any other error is the call's own, raised as it is."""
        first_miss: float | None = None

        def missed(state: RetryCallState) -> None:
            nonlocal first_miss
            assert state.outcome is not None
            exc = state.outcome.exception()
            assert isinstance(exc, Exception)
            first_miss = self._missed(first_miss, exc)

        return {"retry": retry_if_exception_type(NO_ANSWER), "stop": stop_never, "reraise": True,
                "wait": wait_exponential(multiplier=RETRY_FIRST_S, max=RETRY_MAX_S), "before_sleep": missed}

    def answered(self) -> None:
        away_since, self._away_since = self._away_since, None
        if away_since is not None:
            log.info("dockerd.answering_again", away_s=round(time.monotonic() - away_since, 1))

    def _missed(self, first_miss: float | None, exc: Exception) -> float:
        """One call found dockerd not answering: when it first did (DockerdAway past the grace)."""
        now = time.monotonic()
        first_miss = now if first_miss is None else first_miss
        if self._away_since is None:
            self._away_since = now
            log.warning("dockerd.not_answering", retry_for_s=self.grace_s,
                        error=f"{type(exc).__name__}: {str(exc)[:200]}")
        if now - first_miss >= self.grace_s:
            raise DockerdAway(
                f"dockerd did not answer for {self.grace_s:g} s (stopped or restarting): the rollout "
                "ended as an infrastructure failure, not scored; `make docker` starts dockerd") from exc
        return first_miss
