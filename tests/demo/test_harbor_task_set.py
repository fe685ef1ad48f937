"""The CPU demo's Harbor task set (config/data/harbor_cpu): what its generator writes, every task sound —
its solution scores 1 and doing nothing scores 0 — and a train / held-out split of the same skills.

Soundness is checked here on the host, each task's /app and /logs/verifier moved into a temporary folder;
the same tasks through veri's sandbox and verifier are the Harbor tiers' tests."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TASK_SET = REPO / "config/data/harbor_cpu"


def _generator():
    spec = importlib.util.spec_from_file_location("harbor_cpu_generate", TASK_SET / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _tree(root: Path) -> dict[str, tuple[bytes, bool]]:
    return {str(path.relative_to(root)): (path.read_bytes(), bool(path.stat().st_mode & 0o100))
            for path in sorted(root.rglob("*")) if path.is_file()}


def _task_folders() -> list[Path]:
    return sorted(path.parent for path in TASK_SET.glob("*/*/task.toml"))


def test_the_committed_tasks_are_what_the_generator_writes(tmp_path: Path):
    _generator().write_all(tmp_path)
    committed = {name: value for name, value in _tree(TASK_SET).items()
                 if name.startswith(("train/", "held_out/"))}
    assert committed == _tree(tmp_path), "run python config/data/harbor_cpu/generate.py and commit what it writes"


def test_at_least_64_tasks_split_by_family_into_train_and_held_out():
    folders = _task_folders()
    assert len(folders) >= 64
    families: dict[str, set[str]] = {}
    for folder in folders:
        config = tomllib.loads((folder / "task.toml").read_text())
        families.setdefault(config["metadata"]["family"], set()).add(folder.parent.name)
        assert (folder / "instruction.md").read_text().strip()
    assert all(splits == {"train", "held_out"} for splits in families.values()), families
    train = {path.name for path in folders if path.parent.name == "train"}
    held_out = {path.name for path in folders if path.parent.name == "held_out"}
    assert not train & held_out


def _verify(task: Path, tmp_path: Path, *, solve: bool) -> str:
    """The task's reward with its solution run first (or nothing: Harbor's nop), /app and /logs in tmp_path."""
    app, logs = tmp_path / "app", tmp_path / "logs"
    app.mkdir(parents=True)
    for source in (task / "environment").iterdir():
        if source.name != "Dockerfile":
            (app / source.name).write_bytes(source.read_bytes())

    def run(script: Path) -> None:
        text = re.sub(r"/(app|logs)\b(?!\.)", lambda found: str(tmp_path / found[1]), script.read_text())
        subprocess.run(["bash", "-c", text], cwd=app, check=True, capture_output=True, timeout=30)

    if solve:
        run(task / "solution/solve.sh")
    run(task / "tests/test.sh")
    return (logs / "verifier/reward.txt").read_text().strip()


@pytest.mark.needs("process")
@pytest.mark.parametrize("task", _task_folders(), ids=lambda path: f"{path.parent.name}/{path.name}")
def test_the_solution_scores_1_and_doing_nothing_0(task: Path, tmp_path: Path):
    assert _verify(task, tmp_path / "oracle", solve=True) == "1"
    assert _verify(task, tmp_path / "nop", solve=False) == "0"
