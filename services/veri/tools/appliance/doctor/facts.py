"""One fact of the host that decides a first run: what was found, pass / fail, and the fix."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Status(StrEnum):
    PASS = "pass"
    FAIL = "fail"  # the run would fail: `make train` stops here
    WARN = "warn"  # it may run, but something is off (named)
    INFO = "info"  # nothing to check here (what was skipped, and why)


@dataclass(frozen=True)
class Fact:
    name: str
    status: Status
    found: str
    fix: str = ""


def render(facts: list[Fact], verdict_of: list[Fact] | None = None) -> str:
    """An aligned table, the fix under each failing or warning line; the last line: the verdict (of
    `verdict_of` when given: a table of some facts, the verdict of all)."""
    width = max((len(fact.name) for fact in facts), default=0)
    lines = []
    for fact in facts:
        lines.append(f"  {fact.status.upper():4}  {fact.name:<{width}}  {fact.found}")
        if fact.fix and fact.status in (Status.FAIL, Status.WARN):
            lines.append(f"  {'':4}  {'':<{width}}  fix: {fact.fix}")
    failed = sum(fact.status == Status.FAIL for fact in (facts if verdict_of is None else verdict_of))
    lines.append(f"veri doctor: {failed} problem{'s' if failed != 1 else ''}" + (
        " (FAIL above, each with its fix)" if failed else ": nothing stops a first run"))
    return "\n".join(lines)
