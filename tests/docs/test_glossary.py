"""The glossary (docs/glossary.md) defines the words veri uses in a sense of its own, and the pages a newcomer
reads first link each of those words they use to its definition."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GLOSSARY = REPO / "docs/glossary.md"
TERMS = ["span", "bridged", "branch", "row", "episode", "group", "step", "version", "staleness", "masked", "rule",
         "verdict"]
FIRST_READ = ["docs/architecture.md", "docs/getting-started.md"]
CODE = re.compile(r"^```.*?^```|`[^`\n]*`", re.MULTILINE | re.DOTALL)


def defined_terms(text: str) -> list[str]:
    return re.findall(r"^### (\S+)$", text, re.MULTILINE)


def unlinked_terms(text: str) -> list[str]:
    """The glossary's words a page uses in its prose (not in code) without linking any use to the glossary."""
    prose = CODE.sub("", text)
    used = [term for term in TERMS if re.search(rf"\b{term}(e?s)?\b", prose, re.IGNORECASE)]
    return [term for term in used if f"glossary.md#{term})" not in text]


def test_the_glossary_defines_every_term():
    defined = defined_terms(GLOSSARY.read_text(encoding="utf-8"))
    assert set(TERMS) <= set(defined), sorted(set(TERMS) - set(defined))


def test_the_first_pages_link_each_term_they_use():
    for page in FIRST_READ:
        missing = unlinked_terms((REPO / page).read_text(encoding="utf-8"))
        assert not missing, f"{page} uses {missing} without a link to docs/glossary.md: link the first use"


def test_an_unlinked_term_is_found():
    assert unlinked_terms("Each span is a call; a `group` in code does not count.") == ["span"]
    assert unlinked_terms("Each [span](glossary.md#span) is a call.") == []
