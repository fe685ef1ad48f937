"""The rollout record: everything known about one rollout, as the archive stores it (one JSON line).

A record is trained on only when `trainable`: every rule that fired is in `verdicts` (the episode's
and the reward's), so the job page, the metrics and `veri debug` all read the same verdicts.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from veri.core.episodes import Episode, RolloutStatus
from veri.core.launch import VerifierResult
from veri.core.records import Span
from veri.core.rules import Effect, Verdict, VerifierError
from veri.core.token_account import TokenAccount, sampled_tokens, token_account

REWARD_FN_PREFIX = "reward_fn/"  # a function's own figures in the step metrics and eval.json ("reward" is the total)


class RewardOutcome(BaseModel):
    """The reward of one rollout. `reward` is None when any function failed (reward_error): masked."""

    model_config = ConfigDict(extra="forbid")

    reward: float | None
    per_function: dict[str, float | None] = Field(
        default_factory=dict, description="each function's own (unweighted) value; None = failed or no value"
    )
    verdicts: list[Verdict] = Field(default_factory=list)


class VerifierRecord(BaseModel):
    """What a Harbor task's verifier said about the rollout (`LaunchResult.verifier` without its files,
    which the archive keeps in the rollout's verifier/ folder: `files` names them)."""

    model_config = ConfigDict(extra="forbid")

    error: VerifierError = VerifierError.NONE
    message: str = ""
    exit_code: int | None = None
    reward: float | None = Field(default=None, description="reward.json's `reward`, else reward.txt; None on error")
    rewards: dict[str, float] = Field(default_factory=dict, description="reward.json's numeric keys")
    ignored_keys: list[str] = Field(default_factory=list, description="reward.json keys that are not numbers")
    stdout_tail: str = Field(default="", description="test-stdout.txt's tail")
    stderr_tail: str = ""
    duration_s: float = 0.0
    files: list[str] = Field(default_factory=list, description="/logs/verifier's files, archived beside the record")
    files_left_out: list[str] = Field(default_factory=list, description="files over the archive's size cap")

    @classmethod
    def of(cls, result: VerifierResult) -> VerifierRecord:
        return cls(error=result.error, message=result.message, exit_code=result.exit_code, reward=result.reward,
                   rewards=result.rewards, ignored_keys=result.ignored_keys, stdout_tail=result.stdout_tail,
                   stderr_tail=result.stderr_tail, duration_s=result.duration_s, files=sorted(result.files))

    def result(self) -> VerifierResult:
        """Back as the launcher's result (without files): what `build_episode` judges (`veri debug`)."""
        fields = self.model_dump(exclude={"files", "files_left_out"})
        if not self.ran:  # the launcher's result of a failed verifier carries no reward
            fields |= {"reward": None, "rewards": {}}
        return VerifierResult(**fields)

    def line(self) -> str:
        """One line: what the tests said (`veri debug`, the console)."""
        took = f"exit code {self.exit_code if self.exit_code is not None else '-'}, {self.duration_s:.1f}s"
        if not self.ran:
            return f"verifier {self.error}: {self.message or 'no reward'} ({took})"
        keys = ", ".join(f"{key} {value:g}" for key, value in sorted(self.rewards.items()) if key != "reward")
        reward = f"reward {self.reward:g}" if self.reward is not None else "no `reward` key"
        return f"verifier {reward}{f' ({keys})' if keys else ''} ({took})"

    @property
    def ran(self) -> bool:
        """The tests ran and gave a reward (no_reward, timeout and error: they could not say anything)."""
        return self.error is VerifierError.NONE

    def scores(self) -> dict[str, float] | None:
        """What the reward functions get as `verifier`: reward.json's numbers and `reward` (None: no reward)."""
        if not self.ran:
            return None
        return {**self.rewards, **({"reward": self.reward} if self.reward is not None else {})}


class RolloutRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rollout_id: str
    task_index: int
    rollout_index: int = Field(description="position in its GRPO group (0 .. rollouts_per_prompt-1)")
    policy_step: int | None = Field(
        default=None, description="the training step this rollout was sampled for (max_staleness >= 1: that trains it)"
    )
    staleness: int | None = Field(
        default=None, description="max_staleness >= 1: policy versions between its oldest span and the weights"
        " that trained it (0: on-policy; None: a synchronous job, always on-policy)",
    )
    task: dict[str, Any] = Field(default_factory=dict, description="the dataset row (after column_mapping)")
    status: RolloutStatus
    exit_code: int | None = None
    spans: list[Span] = Field(default_factory=list)
    episode: Episode
    reward: RewardOutcome | None = Field(default=None, description="None when the rollout was not scored")
    verifier: VerifierRecord | None = Field(default=None, description="a Harbor task's verifier (None: no task)")

    @property
    def verdicts(self) -> list[Verdict]:
        return [*self.episode.verdicts, *(self.reward.verdicts if self.reward else [])]

    @property
    def tool_call_failures(self) -> dict[str, int]:
        """Tool calls the renderer could not parse (or that name no offered tool), by kind, over every span."""
        counts: dict[str, int] = {}
        for failure in (failure for span in self.spans for failure in span.tool_call_failures):
            counts[failure.kind.value] = counts.get(failure.kind.value, 0) + 1
        return counts

    @property
    def tool_calls_attempted(self) -> int:
        """Tool calls the policy wrote, parsed or not: the harness's calls plus those it got as text."""
        return sum(
            len(span.reply_message.get("tool_calls") or []) + sum(f.sent_as == "text" for f in span.tool_call_failures)
            for span in self.spans
        )

    @property
    def trainable(self) -> bool:
        """Used in the loss: its reward counts (`rewarded`) and no rule masked it (`completion_truncated`)."""
        return self.rewarded and not any(verdict.effect == Effect.MASK for verdict in self.verdicts)

    @property
    def rewarded(self) -> bool:
        """Its reward counts in its group's baseline: a row exists, no rule rejected it, and it has a reward."""
        if any(verdict.effect == Effect.REJECT for verdict in self.verdicts) or self.episode.row is None:
            return False
        return self.reward is not None and self.reward.reward is not None

    @property
    def tokens(self) -> TokenAccount:
        """Where its sampled tokens went (`core.token_account`)."""
        sampled = {span.request_index: sampled_tokens(span.completion_token_ids, span.response) for span in self.spans}
        return token_account(self.episode, sampled, self.verdicts, trainable=self.trainable)
