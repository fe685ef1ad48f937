"""Where a rollout's sampled tokens went: trained (each exactly once), or dropped, and why.

    tokens: sampled S, trained T, dropped D (reason: count, ...)

S counts every span's completion (a span without ids counts the usage its response reported), T the
sampled tokens of the rollout's rows (`Episode.rows`) when it is trainable. Dropped tokens carry a rule's
name: the rule that rejected or masked the rollout (all S), `response_truncated` (cut at max_response_length), or
`history_rewritten` (a record written before branches, whose off-chain spans were left out).
`veri debug`, the step metrics (`tokens/dropped_fraction`) and the console read the same account.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

from veri.core.episodes import Episode
from veri.core.rules import Effect, Verdict


class TokenAccount(BaseModel):
    sampled: int
    trained: int
    dropped: dict[str, int] = Field(default_factory=dict, description="reason (a rule's name) -> tokens")

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())

    def line(self) -> str:
        why = ", ".join(f"{reason} {count}" for reason, count in self.dropped.items())
        return (f"tokens: sampled {self.sampled}, trained {self.trained}, dropped {self.dropped_total}"
                + (f" ({why})" if why else ""))


def sampled_tokens(completion_ids: Sequence[int], response: Mapping[str, Any] | None = None) -> int:
    """One span's sampled tokens: its ids, or the usage its response reported when it has none."""
    if completion_ids:
        return len(completion_ids)
    usage = (response or {}).get("usage") or {}
    count = usage.get("completion_tokens") or usage.get("output_tokens") or 0
    return count if isinstance(count, int) and count > 0 else 0


def token_account(
    episode: Episode, sampled: Mapping[int, int], verdicts: Sequence[Verdict], *, trainable: bool
) -> TokenAccount:
    """`sampled`: request_index -> that span's sampled tokens."""
    total = sum(sampled.values())
    if not trainable:
        rejects = [v.rule.value for v in verdicts if v.effect == Effect.REJECT]
        masks = [v.rule.value for v in verdicts if v.effect == Effect.MASK]
        reason = (rejects or masks or ["not_scored"])[0]
        return TokenAccount(sampled=total, trained=0, dropped={reason: total} if total else {})
    trained = sum(sum(row.env_mask) for row in episode.rows)
    in_rows = {*episode.chain, *(index for branch in episode.branches for index in branch.spans)}
    dropped: dict[str, int] = {}
    if outside := sum(count for index, count in sampled.items() if index not in in_rows):
        dropped["history_rewritten"] = outside
    if cut := total - outside - trained:
        dropped["response_truncated"] = cut
    return TokenAccount(sampled=total, trained=trained, dropped=dropped)
