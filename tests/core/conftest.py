from __future__ import annotations

from pathlib import Path

import pytest

from tests.core.jobs import make_job_dir


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    return make_job_dir(tmp_path)
