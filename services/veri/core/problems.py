"""A problem found in a job before it starts: where, what is wrong, and the fix. Checks collect them
all, so the user sees every problem at once."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    where: str  # the config key ("dataset.path", "grpo.lerning_rate") or "" for the whole job
    message: str
    fix: str

    def __str__(self) -> str:
        where = f"{self.where}: " if self.where else ""
        return f"{where}{self.message}\n    fix: {self.fix}"


class ProblemsError(ValueError):
    """Raised with every problem found (not just the first)."""

    def __init__(self, source: str, problems: list[Problem]):
        self.source = source
        self.problems = problems
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        super().__init__("\n".join([f"{source}: {count}", *(f"  {p}" for p in problems)]))
