"""The generated reference pages (docs/reference/) are what the code gives now: a changed field
description, a new command or flag, a new rule fails here until `make docs` rewrites the page."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from scripts.docs import reference
from veri.cli import build_parser, commands
from veri.core.config import JobConfig
from veri.core.harbor_task import EnvironmentSection, HarborTaskConfig
from veri.core.harness import HarnessManifest
from veri.core.rules import RULES

REPO = Path(__file__).resolve().parents[2]


def test_the_committed_reference_pages_match_the_code():
    stale = reference.stale_pages()
    assert not stale, f"{stale} differ from what the code gives: run `make docs` and commit them"


def test_a_page_that_drifted_is_named(tmp_path: Path):
    for page in reference.PAGES:
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / page, tmp_path / page)
    cli = tmp_path / "docs/reference/cli.md"
    cli.write_text(cli.read_text().replace("the capture proxy", "the proxy of old"))
    assert reference.stale_pages(tmp_path) == ["docs/reference/cli.md"]
    assert reference.write_pages(tmp_path) == ["docs/reference/cli.md"]
    assert reference.stale_pages(tmp_path) == []


def test_every_key_command_and_rule_has_its_row():
    config, cli, rules = (reference.config_reference(), reference.cli_reference(), reference.rules_reference())
    for name, info in JobConfig.model_fields.items():
        assert f"| `{name}` |" in config and (info.description or "")[:30] in config
    for name in HarnessManifest.model_fields:
        assert f"| `{name}` |" in config
    for path, _line, _parser in commands(build_parser()):
        assert f"\n## {' '.join(path)}\n" in cli
    assert "`--policy-url URL`" in cli and "| `--workers WORKERS` | `1` |" in cli
    for rule, spec in RULES.items():
        assert f"| `{rule.value}` |" in rules and spec.fix[:30] in rules
    harbor = reference.harbor_task_reference()
    for name in HarborTaskConfig.model_fields:
        assert f"| `{name}` |" in harbor
    for name in EnvironmentSection.model_fields:
        assert f"| `environment.{name}` |" in harbor


def test_the_cli_page_holds_no_value_of_the_machine_it_was_made_on(monkeypatch: pytest.MonkeyPatch):
    """Some parsers take defaults from VERI_* variables, the control token among them."""
    plain = reference.cli_reference()
    monkeypatch.setenv("VERI_CONTROL_TOKEN", "s3cret-token-of-this-box")
    monkeypatch.setenv("VERI_PROXY_URL", "http://10.9.8.7:8000")
    monkeypatch.setenv("COLUMNS", "40")
    made_here = reference.cli_reference()
    assert "s3cret-token-of-this-box" not in made_here and "10.9.8.7" not in made_here
    assert made_here == plain


def test_help_text_cannot_open_a_tag_on_the_page():
    assert reference.prose("tag R/<image> with `R/<image>`") == "tag R/&lt;image&gt; with `R/<image>`"
    assert reference.cell("a | b `x | y`") == "a \\| b `x \\| y`"
