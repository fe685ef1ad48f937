"""The README is a front page, and what the README and the docs tell a reader to run exists: every
relative link's file, every `make TARGET` they name."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").rglob("*.md"))]
FRONT_PAGE_LIMIT = 12_000  # characters: a few screens; the detail lives under docs/
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`([^`\n]+)`")
MAKE = re.compile(r"(?<![\w/.-])make((?:[ \t]+[a-z][a-z0-9-]*(?![\w=/.-]))+)")


def _targets() -> set[str]:
    database = subprocess.run(["make", "-qp"], cwd=REPO, capture_output=True, text=True, timeout=60).stdout
    return {line.split(":")[0] for line in database.splitlines() if re.match(r"[a-z][a-z0-9-]*:", line)}


def _code(text: str) -> list[str]:
    """The text of code blocks and code spans: where a page gives a command to run."""
    blocks = FENCE.findall(text)
    return blocks + CODE_SPAN.findall(FENCE.sub("", text))


def mentioned_targets(text: str) -> set[str]:
    return {target for snippet in _code(text) for match in MAKE.finditer(snippet) for target in match.group(1).split()}


def test_the_readme_is_a_front_page():
    size = len(README.read_text(encoding="utf-8"))
    assert size <= FRONT_PAGE_LIMIT, f"README.md is {size} characters: move the detail to a page under docs/"


def test_every_relative_link_of_the_readme_exists():
    relative = [target for target in LINK.findall(README.read_text(encoding="utf-8")) if "://" not in target]
    assert len(relative) >= 5, relative  # the front page links its docs pages: none found is a LINK that misreads
    for target in relative:
        assert (REPO / target).exists(), f"README.md links to {target}, which does not exist"


@pytest.mark.needs("process")
def test_every_make_target_the_pages_name_exists():
    targets = _targets()
    assert {"test", "train", "docs", "lint"} <= targets
    for page in PAGES:
        missing = mentioned_targets(page.read_text(encoding="utf-8")) - targets
        assert not missing, f"{page.relative_to(REPO)} names make targets that do not exist: {sorted(missing)}"


def test_the_target_finder_reads_commands_not_prose():
    text = ("Run `make train CONFIG=x RESUME=1` or `make down && make up`.\n```\nmake vendor-gpu vendor-vllm-cpu\n"
            "cd /opt && make images && make no-such-thing\n```\nTo make the box ready, `make` stops early.")
    assert mentioned_targets(text) == {"train", "down", "up", "vendor-gpu", "vendor-vllm-cpu", "images",
                                       "no-such-thing"}
