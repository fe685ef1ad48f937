"""The archive page's query, parsed from a request's query string (what the facet form sends).

    step=N | step_min=A&step_max=B   the policy step facet (one step, or a range)
    status, rule, task               exact; reward_min, reward_max  inclusive; q  text in the final answer
    sort (step|reward|turns|tokens|task), desc=1, page (from 1), per_page (at most MAX_PER_PAGE)

An empty field means "any" (an HTML form sends every field). A value that does not parse is a BadQuery
naming the field and what it takes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlencode

from veri.archive.index_query import SORTS, RolloutQuery
from veri.core.episodes import RolloutStatus
from veri.core.rules import Rule

PER_PAGE = 50
MAX_PER_PAGE = 500


class BadQuery(ValueError):
    pass


@dataclass(frozen=True)
class ArchivePage:
    query: RolloutQuery
    page: int = 1
    per_page: int = PER_PAGE

    @property
    def offset(self) -> int:
        return (self.page - 1) * self.per_page

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> ArchivePage:
        step = _number(params, "step", int)
        status, rule, sort = params.get("status") or None, params.get("rule") or None, params.get("sort") or "step"
        if status is not None and status not in set(RolloutStatus):
            raise BadQuery(f"status={status!r}: use one of {', '.join(RolloutStatus)}")
        if rule is not None and rule not in set(Rule):
            raise BadQuery(f"rule={rule!r}: use one of {', '.join(Rule)}")
        if sort not in SORTS:
            raise BadQuery(f"sort={sort!r}: use one of {', '.join(SORTS)}")
        query = RolloutQuery(
            step_min=step if step is not None else _number(params, "step_min", int),
            step_max=step if step is not None else _number(params, "step_max", int),
            status=status, rule=rule,
            reward_min=_number(params, "reward_min", float), reward_max=_number(params, "reward_max", float),
            task_index=_number(params, "task", int), text=params.get("q") or None,
            sort=sort, descending=params.get("desc") in ("1", "true", "on"),
        )
        page = _number(params, "page", int) or 1
        per_page = _number(params, "per_page", int) or PER_PAGE
        if page < 1 or not 1 <= per_page <= MAX_PER_PAGE:
            raise BadQuery(f"page starts at 1 and per_page is 1..{MAX_PER_PAGE}")
        return cls(query, page, per_page)

    def params(self, **changes: Any) -> dict[str, str]:
        """The query string's fields of this page (with `changes`), without the empty ones."""
        page = replace(self, **{key: value for key, value in changes.items() if key in ("page", "per_page")})
        q = page.query
        fields = {
            "step_min": q.step_min, "step_max": q.step_max, "status": q.status, "rule": q.rule,
            "reward_min": q.reward_min, "reward_max": q.reward_max, "task": q.task_index, "q": q.text,
            "sort": q.sort if q.sort != "step" else None, "desc": "1" if q.descending else None,
            "page": page.page if page.page != 1 else None,
            "per_page": page.per_page if page.per_page != PER_PAGE else None,
        }
        return {key: str(value) for key, value in fields.items() if value is not None}

    def link(self, **changes: Any) -> str:
        return "?" + urlencode(self.params(**changes))


def _number(params: Mapping[str, str], name: str, kind: type) -> Any:
    raw = (params.get(name) or "").strip()
    if not raw:
        return None
    try:
        return kind(raw)
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise BadQuery(f"{name}={raw!r}: give {what}, or leave it empty for any") from None
