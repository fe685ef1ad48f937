"""Console test fixtures: a state folder with a finished job written by the trainer's archive writer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from testkit.console_archive import write_job
from veri.services.console.app import create_app
from veri.services.console.settings import ConsoleSettings


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    folder = tmp_path_factory.mktemp("state")
    with write_job(folder / "jobs", "demo", tiny_model):
        pass  # closing the `with` writes job.json's outcome: finished
    return folder


@pytest.fixture(scope="module")
def client(state: Path) -> Iterator[TestClient]:
    with TestClient(create_app(ConsoleSettings(state_dir=state)), base_url="http://127.0.0.1") as opened:
        yield opened
