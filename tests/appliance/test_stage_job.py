"""A job file anywhere: `make train` hands the trainer container a copy of the job file (`veri stack-env
CONFIG --name JOB`, the step scripts/stack/train.sh runs), readable by the container's user wherever the
original lies, with the job's paths as the container sees them; a path it cannot see is refused before
anything starts, naming the fix."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from veri.core.config import parse_config, read_config_file
from veri.tools.appliance.stack_env import CHECKOUT_IN_TRAINER, JOB_FILES_IN_TRAINER, MODELS_IN_CONTAINERS

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "config/url_extract_tiny.yaml"


def stack_env(config: Path, state: Path, *args: str) -> subprocess.CompletedProcess:
    """As train.sh runs it: from the checkout."""
    return subprocess.run([sys.executable, "-m", "veri.cli", "stack-env", str(config), "--state", str(state), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=120)


def private_copy(tmp_path: Path, raw: dict) -> Path:
    """The job in a folder only its owner may enter (root's home, say), the file readable by its owner only."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    path = home / "my job.yaml"
    path.write_text(yaml.safe_dump(raw))
    path.chmod(0o600)
    return path


@pytest.mark.needs("process")
def test_the_trainer_gets_a_copy_it_can_read_with_the_paths_it_sees(tmp_path: Path) -> None:
    original = private_copy(tmp_path, read_config_file(JOB))
    done = stack_env(original, tmp_path / "state", "--name", "demo")
    assert done.returncode == 0, done.stderr
    assert f"export VERI_JOB_FILE={JOB_FILES_IN_TRAINER}/demo.yaml" in done.stdout.splitlines()
    copy = tmp_path / "state" / JOB_FILES_IN_TRAINER.name / "demo.yaml"
    assert stat.S_IMODE(copy.stat().st_mode) == 0o644 and stat.S_IMODE(copy.parent.stat().st_mode) == 0o755
    staged = yaml.safe_load(copy.read_text())
    assert staged["model"] == str(MODELS_IN_CONTAINERS / "tiny")  # VERI_MODELS_DIR is mounted there
    assert staged["dataset"]["path"] == "config/data/url_extract.jsonl"  # the checkout is its working folder
    assert staged["rewards"] == [{"file": "config/rewards/url_extract.py"}]
    # the same job, read where the container reads it (the checkout), but for the model's place
    job, seen = parse_config(read_config_file(original), base_dir=REPO), parse_config(staged, base_dir=REPO)
    assert seen.model_copy(update={"model": job.model}) == job
    assert "backend" in staged and "eval_dataset" not in staged  # the keys the file set, no more


@pytest.mark.needs("process")
def test_a_path_the_trainer_cannot_see_is_refused_before_anything_starts(tmp_path: Path) -> None:
    raw = read_config_file(JOB)
    outside = tmp_path / "data.jsonl"
    outside.write_text((REPO / "config/data/url_extract.jsonl").read_text())
    raw["dataset"] = {"path": str(outside)}
    done = stack_env(private_copy(tmp_path, raw), tmp_path / "state", "--name", "demo")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "dataset.path" in done.stderr and "outside the checkout" in done.stderr
    assert "move it into the checkout" in done.stderr
    assert not (tmp_path / "state" / JOB_FILES_IN_TRAINER.name / "demo.yaml").exists()


@pytest.mark.needs("process")
def test_a_name_that_is_not_a_folder_name_is_refused(tmp_path: Path) -> None:
    done = stack_env(JOB, tmp_path / "state", "--name", "../escape")
    assert done.returncode == 1 and "not a job name" in done.stderr and "Traceback" not in done.stderr


def test_the_stack_reads_the_copy_where_stack_env_puts_it() -> None:
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    trainer = compose["services"]["trainer"]
    assert trainer["working_dir"] == str(CHECKOUT_IN_TRAINER)
    assert f".:{CHECKOUT_IN_TRAINER}:ro" in trainer["volumes"]
    copies = f"${{VERI_STATE_DIR:-./build/state}}/{JOB_FILES_IN_TRAINER.name}:{JOB_FILES_IN_TRAINER}:ro"
    assert copies in trainer["volumes"]
    for script in ("train.sh", "eval.sh"):
        text = (REPO / "scripts/stack" / script).read_text()
        assert 'stack-env "$CONFIG" --name' in text and ' "$VERI_JOB_FILE" ' in text, script
