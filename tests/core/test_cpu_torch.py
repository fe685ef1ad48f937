"""CPU torch on any machine: the venv's torch is a CPU build, and `make venv` asks for one wherever pip's own
sources lack it (scripts/torch-cpu.sh: PyPI's Linux torch is the CUDA build)."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts/torch-cpu.sh"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def test_the_venv_torch_is_a_cpu_build() -> None:
    import torch

    assert torch.version.cuda is None, f"torch {torch.__version__} is a CUDA build: rebuild .venv (make venv)"
    if platform.system() == "Linux":  # elsewhere PyTorch's wheels carry no +cpu
        assert torch.__version__.endswith("+cpu"), torch.__version__
    nvidia = [dist.metadata["Name"] for dist in importlib.metadata.distributions()
              if (dist.metadata["Name"] or "").lower().startswith("nvidia-")]
    assert not nvidia, f"CUDA libraries in the venv: {nvidia}"


def _fake_pip(tmp_path: Path, *, has_cpu_wheel: bool) -> tuple[Path, Path]:
    """A pip that logs its arguments; its configured sources have torch's +cpu wheel or (PyPI) do not."""
    calls = tmp_path / "calls"
    pip = tmp_path / "pip"
    found = "exit 0" if has_cpu_wheel else (
        f'case "$*" in *--extra-index-url\\ {CPU_INDEX}*) exit 0 ;; esac\n'
        'echo "ERROR: No matching distribution found for torch==2.13.0+cpu" >&2; exit 1')
    pip.write_text(f'#!/bin/sh\necho "$*" >>{calls}\n{found}\n')
    pip.chmod(0o755)
    return pip, calls


def _run(pip: Path, *args: str) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "TORCH_INDEX_URL"}
    return subprocess.run([str(SCRIPT), str(pip), "2.13.0", *args], capture_output=True, text=True, env=env,
                          timeout=60)


@pytest.mark.needs("process")
def test_pips_own_sources_come_first(tmp_path: Path) -> None:
    pip, calls = _fake_pip(tmp_path, has_cpu_wheel=True)
    assert _run(pip).returncode == 0
    assert calls.read_text().splitlines() == ["install -q torch==2.13.0+cpu"]


@pytest.mark.needs("process")
def test_without_a_local_cpu_wheel_it_comes_from_pytorchs_cpu_index(tmp_path: Path) -> None:
    pip, calls = _fake_pip(tmp_path, has_cpu_wheel=False)
    done = _run(pip, "--no-cache-dir")
    assert done.returncode == 0, done.stderr
    assert calls.read_text().splitlines() == [
        "install -q --no-cache-dir torch==2.13.0+cpu",
        f"install -q --no-cache-dir torch==2.13.0+cpu --extra-index-url {CPU_INDEX}",
    ]
    assert "not in pip's configured sources" in done.stderr and CPU_INDEX in done.stderr


@pytest.mark.needs("process")
def test_make_venv_installs_the_cpu_build_of_pyprojects_pin(tmp_path: Path) -> None:
    dry = subprocess.run(["make", "-n", "venv", f"VENV={tmp_path / 'venv'}"], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    torch_line, = [line for line in dry.stdout.splitlines() if "torch" in line]
    assert f"TORCH_INDEX_URL={CPU_INDEX} scripts/torch-cpu.sh" in torch_line
    assert torch_line.endswith(f"/bin/pip {importlib.metadata.version('torch').split('+')[0]}")
    lines = dry.stdout.splitlines()
    assert lines.index(torch_line) < next(i for i, line in enumerate(lines) if "-e '.[test]'" in line)
