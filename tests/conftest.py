"""Shared fixtures: the tiny model and real veri servers started the way a user starts them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import RunningServer, start_server


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The deterministic tiny model (`make tiny-model` builds it once; otherwise built here)."""
    prebuilt = os.environ.get("VERI_TINY_MODEL")
    if prebuilt and (Path(prebuilt) / "config.json").exists():
        return Path(prebuilt).resolve()
    from veri.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture(scope="session")
def policy_server(tiny_model: Path) -> Iterator[RunningServer]:
    """`veri serve policy` on the tiny model, shared by the whole session."""
    with start_server(["serve", "policy", "--model", str(tiny_model)]) as server:
        yield server
