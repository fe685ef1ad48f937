"""Which rollouts of index.sqlite, and in what order: a `RolloutQuery` as SQL (the console's filters, sorts
and answer search)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

TRIGRAM = 3  # characters: a shorter text cannot use the trigram index (it is matched by a scan)
# The orders the console offers: name -> ORDER BY (ties broken by position, so pages are stable).
SORTS = {
    "step": "step, task_index, rollout_index",
    "reward": "reward, step, task_index, rollout_index",
    "turns": "turns, step, task_index, rollout_index",
    "tokens": "completion_tokens, step, task_index, rollout_index",
    "task": "task_index, step, rollout_index",
}


@dataclass(frozen=True)
class RolloutQuery:
    """Which rollouts, and in what order. Every field is optional; bounds are inclusive.

    rule: rollouts where that rule fired; sort: a key of SORTS.
    text: a substring of the final answer (its first FINAL_ANSWER_CHARS), case-insensitive, spaces and
    punctuation included as typed ("url is" matches "The URL is https://..."; no words, operators or
    wildcards: "%", "_", "*", quotes are plain characters). From TRIGRAM characters on it is looked up in
    the answers full-text index (trigram, so any substring is found, and case folds for any alphabet);
    a shorter text is a LIKE scan of the rows the other filters leave (case folds for A-Z only).
    """

    step_min: int | None = None
    step_max: int | None = None
    status: str | None = None
    rule: str | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    task_index: int | None = None
    text: str | None = None
    trainable: bool | None = None
    sort: str = "step"
    descending: bool = False

    def __post_init__(self) -> None:
        if self.sort not in SORTS:
            raise ValueError(f"sort {self.sort!r}: use one of {', '.join(SORTS)}")

    def order_by(self) -> str:
        columns = SORTS[self.sort]
        return ", ".join(f"{column} DESC" for column in columns.split(", ")) if self.descending else columns

    def where(self) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []

        def add(clause: str, value: Any) -> None:
            if value is not None:
                clauses.append(clause)
                params.append(value)

        add("step >= ?", self.step_min)
        add("step <= ?", self.step_max)
        add("status = ?", None if self.status is None else str(self.status))
        add("instr(',' || verdicts || ',', ',' || ? || ',') > 0", None if self.rule is None else str(self.rule))
        add("reward >= ?", self.reward_min)
        add("reward <= ?", self.reward_max)
        add("task_index = ?", self.task_index)
        add("trainable = ?", None if self.trainable is None else int(self.trainable))
        if self.text and len(self.text) >= TRIGRAM:
            phrase = '"' + self.text.replace('"', '""') + '"'  # one FTS5 string: consecutive trigrams
            add("rowid IN (SELECT rowid FROM answers WHERE answers MATCH ?)", phrase)
        elif self.text:
            escaped = self.text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            add("final_answer LIKE ? ESCAPE '\\'", f"%{escaped}%")
        return (" WHERE " + " AND ".join(clauses) if clauses else ""), params
