"""Every `veri` command's and subcommand's --help opens with what it does for the user: a description
(argparse shows a subcommand's help line only in its parent's list), whole, and not a developer note."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from veri.cli import DESCRIPTION, build_parser, commands

# What a note for the people who work on veri looks like, as opposed to what a command does.
DEVELOPER_NOTE = re.compile(r"\bcli\.py\b|\bimport(s|ed)?\b|\bmodule\b|__\w+__|\bkept\b|\bsee veri/|\bTODO\b",
                            re.IGNORECASE)
COMMANDS = [(" ".join(path), parser) for path, _line, parser in commands(build_parser())]


def opening(help_text: str) -> str:
    """The paragraph after the usage lines: what `--help` shows first."""
    paragraphs = help_text.split("\n\n")
    assert paragraphs[0].startswith("usage:")
    return " ".join(paragraphs[1].split()) if len(paragraphs) > 1 else ""


def problem(text: str) -> str | None:
    if not text:
        return "no description: --help opens with its arguments"
    if text.lower().startswith(("positional arguments", "options")):
        return "no description: --help opens with its arguments"
    if DEVELOPER_NOTE.search(text):
        return f"a developer note ({DEVELOPER_NOTE.search(text).group(0)!r})"
    if text.count("(") != text.count(")") or text.count("`") % 2 or text.rstrip().endswith((":", "(", ",", ";")):
        return "cut mid-sentence"
    return None


@pytest.mark.parametrize(("name", "parser"), COMMANDS, ids=[name for name, _ in COMMANDS])
def test_help_opens_with_what_the_command_does(name, parser):
    text = opening(parser.format_help())
    assert problem(text) is None, f"`{name} --help` opens with {text!r}: {problem(text)}"


@pytest.mark.needs("process")
def test_veri_help_opens_with_what_veri_does():
    assert opening(build_parser().format_help()) == " ".join(DESCRIPTION.split())
    assert DESCRIPTION.startswith("Train an LLM policy")
    # What a user types, through the installed console script: the same text, nothing printed before it.
    veri = Path(sys.executable).with_name("veri")  # the venv's entry point (pyproject's [project.scripts])
    shown = subprocess.run([str(veri), "--help"], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "COLUMNS": "100"})
    assert shown.returncode == 0 and not shown.stderr, shown.stderr
    assert opening(shown.stdout) == " ".join(DESCRIPTION.split())


@pytest.mark.parametrize("bad", ["`veri` command line. Each service owns its subcommands in its own `cli.py` (kept "
                                 "import-light:", "", "positional arguments: x", "see veri/replay/__init__.py"])
def test_the_check_refuses_what_veri_help_used_to_say(bad):
    assert problem(bad) is not None


def undocumented(parser) -> list[str]:
    """The arguments (flags and positionals) of one command that `--help` lists without a word about them."""
    return [", ".join(action.option_strings) or action.dest for action in parser._actions
            if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))
            and (action.help is None or action.help == argparse.SUPPRESS or not action.help.strip())]


def test_every_argument_of_every_command_has_help():
    missing = {name: found for name, parser in COMMANDS if (found := undocumented(parser))}
    assert not missing, f"arguments without help (give each a help= that says what it does): {missing}"


def test_the_walk_sees_an_argument_without_help():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=1, help="the port")
    parser.add_argument("--host")
    parser.add_argument("config")
    assert undocumented(parser) == ["--host", "config"]


def test_run_harness_runs_a_harness_as_a_job_without_those_keys_would():
    from veri.core.config import JobConfig

    (run_harness,) = [parser for name, parser in COMMANDS if name == "veri run-harness"]
    defaults = run_harness.parse_args(["--bundle", "b", "--task", "t"])
    assert defaults.max_turns == JobConfig.model_fields["max_turns"].default
    assert defaults.timeout == JobConfig.model_fields["harness_timeout_s"].default
