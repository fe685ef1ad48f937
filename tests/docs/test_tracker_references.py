"""No file of the repository points at a tracker that is not part of it: "(issue N item 2)" tells a reader
nothing they can follow. A comment, docstring or page says the reason itself, or links the page of docs/
that does; a link to an upstream project's issue (a URL) is fine."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# What is not the repository's own text: environments, build outputs, caches.
SKIPPED_DIRS = {".git", ".venv", "build", "vendor", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache",
                ".pytest_cache", "tmp"}
TRACKER_REFERENCE = re.compile(r"\bissues?\s*#?\s*\d+", re.IGNORECASE)


def text_files(root: Path) -> list[Path]:
    found = []
    for path in root.iterdir():
        if path.is_symlink() or path.name in SKIPPED_DIRS or path.name.endswith(".egg-info"):
            continue
        if path.is_dir():
            found += text_files(path)
        elif path.is_file() and b"\0" not in path.read_bytes()[:4096]:
            found.append(path)
    return found


def references(text: str) -> list[str]:
    """The lines that name an issue number without a link to follow."""
    return [line.strip() for line in text.splitlines() if TRACKER_REFERENCE.search(line) and "://" not in line]


def test_no_file_names_an_issue_of_a_tracker_outside_the_repository():
    files = text_files(REPO)
    assert REPO / "README.md" in files and REPO / "services/veri/cli.py" in files  # the walk reads the tree
    found = {str(path.relative_to(REPO)): lines for path in files
             if (lines := references(path.read_text(encoding="utf-8", errors="replace")))}
    assert not found, ("these name an issue of a tracker a reader cannot follow; say the reason, or link the docs "
                       f"page that does: {found}")


def test_the_check_finds_the_forms_it_replaced():
    number = "21"  # built here, so this file does not hold what it looks for
    for line in (f"(issue {number} item 2)", f"Issue {number}'s fault scenarios", f"see issue #{number}",
                 f"issues {number} and 22"):
        assert references(line) == [line], line
    upstream = f"vLLM's bug: https://github.com/vllm-project/vllm/issues/{number}"
    assert references(upstream) == []
    assert references("settings_cli: for issue in error.errors()") == []
