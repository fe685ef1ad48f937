"""`veri train` refusing to start, with one line that says why (no servers needed)."""

from __future__ import annotations

import subprocess
import sys

from tests.servers import free_port
from tests.trainer.conftest import write_job


def veri(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "veri.cli", *args], capture_output=True, text=True, timeout=120)


def test_an_unreachable_proxy_is_a_one_line_error(tiny_model, tmp_path):
    job = write_job(tmp_path, tiny_model)
    url = f"http://127.0.0.1:{free_port()}"
    result = veri("train", str(job), "--base-dir", str(tmp_path), "--sandbox", "local", "--proxy-url", url,
                  "--output", str(tmp_path / "jobs"))
    assert result.returncode == 1
    assert result.stderr.startswith(f"veri train: the capture proxy at {url} is not reachable")
    assert "Traceback" not in result.stderr and not (tmp_path / "jobs").exists()


def test_config_problems_are_listed_before_anything_starts(tiny_model, tmp_path):
    job = write_job(tmp_path, tiny_model, max_step=3)
    result = veri("train", str(job), "--base-dir", str(tmp_path), "--sandbox", "local")
    assert result.returncode == 1 and "max_step: is not a known key" in result.stderr


def test_docker_sandboxes_need_the_bundles_image(tiny_model, tmp_path):
    job = write_job(tmp_path, tiny_model)
    result = veri("train", str(job), "--base-dir", str(tmp_path), "--sandbox", "docker",
                  "--output", str(tmp_path / "jobs"))
    assert result.returncode == 1 and "--sandbox docker needs --image" in result.stderr
    assert not (tmp_path / "jobs").exists()
