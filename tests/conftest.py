"""Shared fixtures: the tiny model and real veri servers started the way a user starts them."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.servers import RunningServer, start_server
from tests import ci_skips, tiers

# A suite started in the background by a non-interactive shell (`... &`, nohup) inherits SIGINT
# ignored, and so would every process it starts: `make train` would shrug off the Ctrl-C that
# tests/stack/test_train_interrupt.py sends it. Processes started from here get the terminal's default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# tests/fixtures/ holds task folders (Harbor's own test_*.py among them, byte-identical upstream copies):
# data for veri's tests, never collected as tests themselves.
collect_ignore_glob = ["fixtures/*"]


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The deterministic tiny model (`make tiny-model` builds it once; otherwise built here)."""
    prebuilt = os.environ.get("VERI_TINY_MODEL")
    if prebuilt and (Path(prebuilt) / "config.json").exists():
        return Path(prebuilt).resolve()
    from veri.tools.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture(scope="session")
@tiers.fixture_needs("process")
def policy_server(tiny_model: Path) -> Iterator[RunningServer]:
    """`veri serve policy` on the tiny model, shared by the whole session."""
    with start_server(["serve", "policy", "--model", str(tiny_model)]) as server:
        yield server


def pytest_configure(config: pytest.Config) -> None:
    ci_skips.register(config)  # CI=true: a skip whose reason is not on tests/ci_skips.py's list fails the run


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    tiers.mark(items)  # each test's tiers, from the needs it declares (tests/tiers.py)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A tier's tools are checked where its tests run, never at collection: `make test` collects every
    tier while its background set-up is still installing them (tests/core/test_collection.py). A test whose
    code needs more than it declares fails here (tests/tiers.py's check)."""
    tiers.check(item)
    for tier, missing in tiers.NEEDS.items():
        if item.get_closest_marker(tier) is not None and (why := missing()):
            pytest.fail(why, pytrace=False)
