"""One GRPO group's rollouts, from proxy sessions to rollout records (not yet scored).

For a task and a group size N: open N sessions on the capture proxy, run the N harness rollouts as
one launcher group, then close the sessions (a straggling call now gets 409) and fetch their spans.
Each rollout's spans become its episode (`build_episode`, then `truncate_episode` at
max_response_length); the launcher's verdict on the harness (status, exit code, log tails, an
infrastructure error) is kept in the record's verdicts, where the job page and `veri debug` show it.

A proxy that restarts mid-step (killed, then brought back by its `restart:` policy) is waited for:
its spans are in its store, and every control call here is safe to repeat (`until_proxy_answers`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from veri.core.episodes import Decoder, Episode, build_episode, truncate_episode
from veri.core.harness import rollout_env
from veri.core.launch import GroupLaunch, LaunchResult, RolloutLaunch, SandboxLimits
from veri.core.records import SessionInfo, Span
from veri.core.rollout_record import RolloutRecord, VerifierRecord
from veri.core.rules import Rule
from veri.infra.http import HttpCallError
from veri.loop.collect.harbor import task_env_for
from veri.loop.collect.runner import RolloutRunner
from veri.services.proxy.control_client import ControlClient

LOG_TAIL_IN_VERDICT = 4000  # characters of stderr / stdout kept in a failed rollout's verdict
PROXY_RESTART_S = 90.0  # how long a control call that got no answer is tried again (a proxy restarting)

T = TypeVar("T")


@dataclass(frozen=True)
class LaunchSettings:
    """What every rollout of the job is launched with."""

    image: str  # the bundle's image (docker) or the bundle folder (local)
    model_name: str  # VERI_POLICY_MODEL
    max_turns: int
    timeout_s: float
    max_parallel: int  # sandboxes running at once, over the whole batch
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    labels: dict[str, str] = field(default_factory=dict)
    # A Harbor dataset's tasks, resolved at the job's start (tools/tasks/prepare.py): {folder: {"image",
    # "runtime_tree", "tools_dir", "harness_command"}}. A row with a task folder runs in that task's image.
    harbor_tasks: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class CollectedRollout:
    record: RolloutRecord
    launch: LaunchResult

    @property
    def output_dir(self) -> Path | None:
        return Path(self.launch.output_dir) if self.launch.output_dir else None


def harness_log(rollout: CollectedRollout) -> str:
    """What the archive keeps beside a rollout's record (rollout-<K>.log): its launch status and log tails."""
    launch = rollout.launch
    lines = [f"status {launch.status}  exit code {launch.exit_code}  {launch.duration_s:.1f}s"]
    if launch.infrastructure_error:
        lines.append(f"infrastructure error: {launch.infrastructure_error}")
    return "\n".join([*lines, "--- stdout (tail) ---", launch.stdout_tail, "--- stderr (tail) ---", launch.stderr_tail])


def verifier_files(rollout: CollectedRollout) -> dict[str, str] | None:
    """What the archive keeps in the rollout's verifier/ folder: /logs/verifier's files (None: no task)."""
    verifier = rollout.launch.verifier
    return verifier.files if verifier is not None else None


class GroupCollector:
    def __init__(
        self,
        control: ControlClient,
        runner: RolloutRunner,
        settings: LaunchSettings,
        *,
        max_response_length: int,
        decoder: Decoder | None = None,
    ) -> None:
        self.control = control
        self.runner = runner
        self.settings = settings
        self.max_response_length = max_response_length
        self.decoder = decoder
        self.running: set[str] = set()  # rollout ids with an open session (the step timeline reads their spans)

    async def collect(
        self, *, step: int, task_index: int, task: dict[str, Any], size: int, first_rollout_index: int = 0
    ) -> list[CollectedRollout]:
        indices = range(first_rollout_index, first_rollout_index + size)
        sessions = await self._open(step, task_index, list(indices))
        ids = {s.rollout_id for s in sessions}
        self.running |= ids
        try:
            launches = [self._launch(s, step, task_index, task, i) for s, i in zip(sessions, indices, strict=True)]
            parallel = min(size, self.settings.max_parallel)
            results = await self.runner.run_group(GroupLaunch(launches=launches, max_parallel=parallel))
        except BaseException:  # cancelled (Ctrl-C: the runner removed the sandboxes) or failed: that error wins
            self.running -= ids
            await self._close(sessions, return_exceptions=True)
            raise
        self.running -= ids
        await self._close(sessions)
        spans = await asyncio.gather(*(asyncio.to_thread(self._spans, s.rollout_id) for s in sessions))
        return [
            CollectedRollout(self._record(step, task_index, task, index, result, rollout_spans), result)
            for index, result, rollout_spans in zip(indices, results, spans, strict=True)
        ]

    async def _open(self, step: int, task_index: int, indices: list[int]) -> list[SessionInfo]:
        labels = self.settings.labels

        def open_one(index: int) -> SessionInfo:
            metadata = {**labels, "step": step, "task_index": task_index, "rollout_index": index}
            return until_proxy_answers(lambda: self.control.open_session(metadata=metadata))

        opening = asyncio.gather(*(asyncio.to_thread(open_one, i) for i in indices), return_exceptions=True)
        try:
            opened = await asyncio.shield(opening)
        except asyncio.CancelledError:  # the opens run on in their threads: close what they open
            good = [item for item in await opening if isinstance(item, SessionInfo)]
            await self._close(good, return_exceptions=True)
            raise
        failures = [item for item in opened if isinstance(item, BaseException)]
        if failures:  # close what did open, then fail the step: without the proxy nothing can be captured
            good = [item for item in opened if isinstance(item, SessionInfo)]
            await self._close(good)
            raise failures[0]
        return [item for item in opened if isinstance(item, SessionInfo)]

    async def _close(self, sessions: list[SessionInfo], *, return_exceptions: bool = False) -> None:
        await asyncio.gather(*(asyncio.to_thread(self._close_one, s.rollout_id) for s in sessions),
                             return_exceptions=return_exceptions)

    def _close_one(self, rollout_id: str) -> SessionInfo:
        return until_proxy_answers(lambda: self.control.close_session(rollout_id))

    def _spans(self, rollout_id: str) -> list[Span]:
        return until_proxy_answers(lambda: self.control.spans(rollout_id))

    def _launch(
        self, session: SessionInfo, step: int, task_index: int, task: dict[str, Any], index: int
    ) -> RolloutLaunch:
        suffix = f"/r/{session.rollout_id}"
        env = rollout_env(
            proxy_base_url=session.anthropic_base_url.removesuffix(suffix),
            rollout_id=session.rollout_id,
            api_key=session.api_key,
            model=self.settings.model_name,
            task=task,
            task_index=task_index,
            rollout_index=index,
            max_turns=self.settings.max_turns,
        )
        labels = {**self.settings.labels, "step": str(step), "task_index": str(task_index),
                  "rollout_index": str(index)}
        return RolloutLaunch(rollout_id=session.rollout_id, image=self.settings.image, env=env,
                             timeout_s=self.settings.timeout_s, limits=self.settings.limits, labels=labels,
                             task_env=task_env_for(task, self.settings.harbor_tasks))

    def _record(
        self, step: int, task_index: int, task: dict[str, Any], index: int, result: LaunchResult, spans: list[Span]
    ) -> RolloutRecord:
        episode = build_episode(spans, result.status, exit_code=result.exit_code, decoder=self.decoder,
                                verifier=result.verifier)
        episode = truncate_episode(with_launch_details(episode, result), self.max_response_length)
        return RolloutRecord(
            rollout_id=result.rollout_id, task_index=task_index, rollout_index=index, policy_step=step, task=task,
            status=result.status, exit_code=result.exit_code, spans=spans, episode=episode,
            verifier=VerifierRecord.of(result.verifier) if result.verifier is not None else None,
        )


def until_proxy_answers(call: Callable[[], T], *, wait_s: float = PROXY_RESTART_S) -> T:
    """`call()`, tried again while the proxy gives no answer (down, restarting) for up to `wait_s`.

    Safe for the collector's calls: closing and reading spans are idempotent, and an open whose answer
    was lost leaves an unused session row behind (the retry opens another). An answer, even an error,
    is final."""
    deadline, delay = time.monotonic() + wait_s, 0.5
    while True:
        try:
            return call()
        except HttpCallError as error:
            if error.status is not None or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 5.0)


def with_launch_details(episode: Episode, result: LaunchResult) -> Episode:
    """The harness_failed / harness_timeout verdict carries the launcher's facts (log tails, infra error)."""
    verdicts = []
    for verdict in episode.verdicts:
        if verdict.rule in (Rule.HARNESS_FAILED, Rule.HARNESS_TIMEOUT):
            details = {**verdict.details, "stderr_tail": result.stderr_tail[-LOG_TAIL_IN_VERDICT:],
                       "stdout_tail": result.stdout_tail[-LOG_TAIL_IN_VERDICT:],
                       "duration_s": round(result.duration_s, 3)}
            message = verdict.message
            if result.infrastructure_error:
                details["infrastructure_error"] = result.infrastructure_error
                message = f"the sandbox could not run the harness: {result.infrastructure_error}"
            verdict = verdict.model_copy(update={"details": details, "message": message})
        verdicts.append(verdict)
    return episode.model_copy(update={"verdicts": verdicts})
