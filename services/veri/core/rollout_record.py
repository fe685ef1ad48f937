"""The rollout record: everything known about one rollout, as the archive stores it (one JSON line).

A record is trained on only when `trainable`: every rule that fired is in `verdicts` (the episode's
and the reward's), so the job page, the metrics and `veri debug` all read the same verdicts.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from veri.core.episodes import Effect, Episode, RolloutStatus, Verdict
from veri.core.records import Span
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
