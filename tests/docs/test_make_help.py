"""`make help` lists every public target. Public is declared on the rule line: `## [ARGS | ]what it does`
(scripts/make-help.awk prints those); a .PHONY target make help leaves out says why there, `## internal: why`.
So every .PHONY target of the Makefile and mk/*.mk is one or the other, and `make` alone is `make help`."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.needs("process")

REPO = Path(__file__).resolve().parents[2]
RULE = re.compile(r"^([a-zA-Z0-9_.-]+):(?!=).*## (.*)$", re.MULTILINE)


def make(*args: str) -> str:
    done = subprocess.run(["make", "--no-print-directory", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def listed(help_text: str) -> list[str]:
    return [line.split()[1] for line in help_text.splitlines() if line.startswith("make ")]


def phony_targets() -> set[str]:
    """Every .PHONY target, from make's own database (what the makefiles declare, includes and all)."""
    database = subprocess.run(["make", "-pRrq", "help"], cwd=REPO, capture_output=True, text=True, timeout=120)
    lines = [line for line in database.stdout.splitlines() if line.startswith(".PHONY:")]
    return {target for line in lines for target in line.removeprefix(".PHONY:").split()}


def internal_targets() -> set[str]:
    texts = [path.read_text() for path in [REPO / "Makefile", *sorted((REPO / "mk").glob("*.mk"))]]
    return {target for text in texts for target, doc in RULE.findall(text) if doc.startswith("internal:")}


def test_make_help_lists_every_public_target() -> None:
    shown = listed(make("help"))
    assert len(shown) == len(set(shown)), f"listed twice: {[t for t in shown if shown.count(t) > 1]}"
    phony, internal = phony_targets(), internal_targets()
    assert {"test-airgap", "images-clean", "gpu-pins-record", "train", "test"} <= set(shown)
    missing = phony - internal - set(shown)
    assert not missing, (f"not in make help: {sorted(missing)}: end each one's rule line with `## what it does`"
                         " (or `## internal: why` to keep it out)")
    assert not set(shown) - phony, f"make help lists targets that are not .PHONY: {sorted(set(shown) - phony)}"
    assert not internal - phony, f"`## internal:` on targets that are not .PHONY: {sorted(internal - phony)}"


def test_make_alone_is_make_help() -> None:
    assert make() == make("help")


def test_a_rule_line_comment_is_what_make_help_prints(tmp_path: Path) -> None:
    makefile = tmp_path / "Makefile"
    makefile.write_text("a: b ## X=1 | does a\n\techo a\nb: ## does b\nc: ## internal: for a\nd:\n")
    shown = subprocess.run(["awk", "-f", str(REPO / "scripts/make-help.awk"), str(makefile)], capture_output=True,
                           text=True, timeout=30).stdout
    assert [" ".join(line.split()) for line in shown.splitlines()] == ["make a X=1 does a", "make b does b"]
