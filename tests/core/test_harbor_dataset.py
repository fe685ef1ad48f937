"""A job's `dataset: {harbor: DIR}`: one row per Harbor task (prompt = instruction, task_name, the [metadata]
keys, the folder), exactly one of `path` and `harbor`, and `veri validate` naming every task's problems at
once before anything starts, from YAML and TOML job files alike."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.core.jobs import job, write_job
from veri.core.config import JobConfig, map_paths
from veri.core.dataset import DatasetConfig, read_dataset
from veri.core.harbor_task import TASK_DIR_COLUMN, TASK_NAME_COLUMN
from veri.core.problems import ProblemsError
from veri.validation.run import check_config

FIXTURES = Path(__file__).resolve().parents[2] / "tests/fixtures/harbor"
OWN = FIXTURES / "veri"
TOML_JOB = """\
model = "models/policy"
backend = "hf"
harness_bundle = "bundle"
rollouts_per_prompt = 4

[dataset]
harbor = "{harbor}"

[[rewards]]
file = "rewards/url.py"

[grpo]
per_device_train_batch_size = 4
"""


@pytest.fixture
def task_set(tmp_path: Path) -> Path:
    """A folder of two runnable tasks (veri's own fixtures)."""
    for name in ("reward-txt", "reward-json"):
        shutil.copytree(OWN / name, tmp_path / "tasks" / name)
    return tmp_path / "tasks"


def test_each_task_is_one_row(task_set: Path):
    rows = read_dataset(DatasetConfig(harbor=task_set))
    assert [row[TASK_NAME_COLUMN] for row in rows] == ["reward-json", "veri/reward-txt"]
    json_row, txt_row = rows
    assert json_row["prompt"].startswith("Create `/app/numbers.txt`")
    assert txt_row["prompt"].startswith("Write the line")  # the canary line is not the agent's to read
    assert (json_row["difficulty"], json_row["category"]) == ("medium", "files")
    assert txt_row["expected"] == "hello from veri"
    # a [metadata] key named like one of veri's columns keeps its value under another name
    assert txt_row["metadata_prompt"].startswith("a metadata key")
    assert Path(txt_row[TASK_DIR_COLUMN]) == (task_set / "reward-txt").resolve()


def test_a_single_task_folder_and_column_mapping(task_set: Path):
    rows = read_dataset(DatasetConfig(harbor=task_set / "reward-txt", column_mapping={"expected": "answer"}))
    assert len(rows) == 1 and rows[0]["answer"] == "hello from veri" and "expected" not in rows[0]


def test_a_refused_task_stops_the_whole_dataset_naming_each_problem(task_set: Path):
    shutil.copytree(OWN / "refused", task_set / "refused")
    with pytest.raises(ProblemsError) as raised:
        read_dataset(DatasetConfig(harbor=task_set))
    wheres = [problem.where for problem in raised.value.problems]
    assert len(wheres) == 7 and all(where.startswith("dataset.harbor: refused: ") for where in wheres)


def test_two_tasks_of_one_name_are_refused(task_set: Path):
    shutil.copytree(task_set / "reward-txt", task_set / "again")
    with pytest.raises(ProblemsError, match="two tasks are named 'veri/reward-txt'"):
        read_dataset(DatasetConfig(harbor=task_set))


def test_path_or_harbor_exactly_one(job_dir: Path, task_set: Path):
    both = check_config(write_job(job_dir, job(dataset={"path": "data/tasks.jsonl", "harbor": str(task_set)})),
                        base_dir=job_dir)
    neither = check_config(write_job(job_dir, job(dataset={"column_mapping": {}})), base_dir=job_dir)
    for report, said in ((both, "both `path` and `harbor` are set"), (neither, "neither `path` nor `harbor` is set")):
        assert [(p.where, p.message) for p in report.problems] == [("dataset", said)]
        assert "`harbor: DIR`" in report.problems[0].fix


@pytest.mark.parametrize("suffix", ["yaml", "toml"])
def test_validate_reads_a_harbor_dataset_from_yaml_and_toml(job_dir: Path, task_set: Path, suffix: str):
    harbor = str(task_set.relative_to(job_dir))
    if suffix == "toml":
        path = job_dir / "job.toml"
        path.write_text(TOML_JOB.format(harbor=harbor))
    else:
        path = write_job(job_dir, job(dataset={"harbor": harbor}))
    report = check_config(path, base_dir=job_dir)
    assert report.problems == []
    assert report.config is not None and report.config.dataset.harbor == task_set.resolve()
    assert any(note.startswith("dataset: 2 tasks") and TASK_DIR_COLUMN in note for note in report.notes)
    assert any("grader_notes is not a key of Harbor's schema" in note for note in report.notes)


def test_validate_names_every_task_problem_at_once(job_dir: Path, task_set: Path):
    shutil.copytree(FIXTURES / "harbor-cookbook" / "multi-step", task_set / "multi-step")
    shutil.copytree(OWN / "refused", task_set / "refused")
    report = check_config(write_job(job_dir, job(dataset={"harbor": str(task_set)})), base_dir=job_dir)
    wheres = [problem.where for problem in report.problems]
    assert "dataset.harbor: multi-step: steps" in wheres
    assert "dataset.harbor: refused: environment.gpus" in wheres and len(wheres) == 8
    assert report.config is None


def test_the_harbor_folder_is_a_path_the_job_maps(task_set: Path, job_dir: Path):
    config = JobConfig.model_validate({**job(dataset={"harbor": str(task_set)}), "model": str(job_dir / "m")})
    seen = {}

    def place(where: str, path: Path) -> Path:
        seen[where] = path
        return Path("/elsewhere") / path.name

    mapped = map_paths(config, place)
    assert seen["dataset.harbor"] == task_set and "dataset.path" not in seen
    assert mapped.dataset.harbor == Path("/elsewhere/tasks") and mapped.dataset.path is None
    assert mapped.dataset.source == Path("/elsewhere/tasks")
