"""`veri export sft` on a job of Harbor tasks: each line carries its task (the instruction as the prompt, the
name and [metadata] columns) and the tests' numbers; a rollout whose tests could not run is never exported,
whatever reward the job's own functions gave it; --min-verifier-reward keeps rollouts by the tests' reward."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.export import archive as plain_archive
from tests.export.harbor_archive import COPY_TASK, JOB, JSON_TASK, could_not_run, harbor_rollout, write_archive
from veri.cli import main
from veri.core.dataset import harbor_row
from veri.core.harbor_task import load_task
from veri.core.rollout_record import RewardOutcome
from veri.core.rules import VerifierError
from veri.tools.export.rows import left_out_because


@pytest.fixture
def jobs(tmp_path: Path) -> Path:
    write_archive(tmp_path / "jobs")
    return tmp_path / "jobs"


def export(jobs: Path, *args: str, job: str = JOB, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[dict], str]:
    out = jobs.parent / "out.jsonl"
    out.unlink(missing_ok=True)
    code = main(["export", "sft", job, "--output", str(jobs), "--out", str(out), *args])
    captured = capsys.readouterr()
    lines = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return code, lines, captured.out + captured.err


def test_lines_carry_the_task_and_its_tests_numbers(jobs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, printed = export(jobs, capsys=capsys)
    assert code == 0, printed
    assert [line["rollout_id"] for line in lines] == ["h-0-0", "h-0-1", "h-1-0", "h-1-2"]
    copy, numbers = load_task(COPY_TASK), load_task(JSON_TASK)
    first, keyed = lines[0], lines[2]
    assert first["prompt"] == copy.instruction and keyed["prompt"] == numbers.instruction
    assert first["task"] == {"task_name": "veri-demo/copy-apple-to-violet", "family": "copy_file",
                             "difficulty": "easy", "harbor_task": str(COPY_TASK.resolve())}
    assert keyed["task"]["task_name"] == "reward-json" and keyed["task"]["category"] == "files"
    assert first["messages"][1] == {"role": "user", "content": copy.instruction}
    # the rollout's reward is the job's (tests + 0.5 from its own function); `verifier` is what the tests said
    assert [line["reward"] for line in lines] == [1.5, 0.5, 1.0, 1.5]
    assert [line["verifier"] for line in lines] == [{"reward": 1.0}, {"reward": 0.0},
                                                    {"reward": 0.5, "correctness": 1.0},
                                                    {"reward": 1.0, "correctness": 1.0}]
    assert "rollouts left out: verifier_no_reward 1, verifier_timeout 1" in printed


def test_a_rollout_whose_tests_could_not_run_is_never_exported(jobs: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    # Its reward is 0.5 (the job's own function): a filter on the reward alone would keep it.
    code, lines, printed = export(jobs, "--min-reward", "0.5", capsys=capsys)
    assert code == 0 and "h-0-2" not in {line["rollout_id"] for line in lines}
    assert "h-1-1" not in {line["rollout_id"] for line in lines}
    assert "verifier_no_reward 1, verifier_timeout 1" in printed
    # ... nor when its record's own verdicts were lost: the verifier's result decides, not the stored reward
    row = harbor_row(load_task(COPY_TASK))
    record = harbor_rollout(0, 2, row, could_not_run(VerifierError.ERROR))
    unjudged = record.model_copy(update={"episode": record.episode.model_copy(update={"verdicts": []}),
                                         "reward": RewardOutcome(reward=1.0, per_function={"reward": 1.0})})
    assert unjudged.trainable
    assert left_out_because(unjudged) == "verifier_error"


def test_min_reward_and_min_verifier_reward(jobs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, _ = export(jobs, "--min-reward", "1", capsys=capsys)  # the job's reward: tests >= 0.5
    assert code == 0 and [line["rollout_id"] for line in lines] == ["h-0-0", "h-1-0", "h-1-2"]
    code, lines, printed = export(jobs, "--min-verifier-reward", "1", capsys=capsys)  # the tests' own reward
    assert code == 0 and [line["rollout_id"] for line in lines] == ["h-0-0", "h-1-2"]
    assert "below_min_verifier_reward 2" in printed
    code, lines, _ = export(jobs, "--min-verifier-reward", "0.5", "--steps", "1", capsys=capsys)
    assert code == 0 and [line["rollout_id"] for line in lines] == ["h-1-0", "h-1-2"]


@pytest.mark.parametrize(("args", "says"), [
    (["--min-verifier-reward", "2"], "lower --min-verifier-reward"),
    (["--min-verifier-reward", "inf"], "--min-verifier-reward inf: give a finite number"),
])
def test_refusals_name_the_fix(jobs: Path, capsys: pytest.CaptureFixture[str], args: list[str], says: str) -> None:
    code, lines, printed = export(jobs, *args, capsys=capsys)
    assert code == 1 and lines == [] and says in printed and "Traceback" not in printed


def test_min_verifier_reward_on_a_job_without_tasks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plain_archive.write_archive(tmp_path / "jobs")
    code, lines, printed = export(tmp_path / "jobs", "--min-verifier-reward", "0", job=plain_archive.JOB,
                                  capsys=capsys)
    assert code == 1 and lines == []
    assert "no_verifier_reward 5" in printed and "use --min-reward" in printed


def test_other_jobs_lines_carry_their_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plain_archive.write_archive(tmp_path / "jobs")
    code, lines, _ = export(tmp_path / "jobs", job=plain_archive.JOB, capsys=capsys)
    assert code == 0 and lines and all(line["verifier"] is None for line in lines)
    assert all(set(line) >= {"prompt", "task"} for line in lines)


def test_the_export_loads_as_a_dataset(jobs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Tasks with different [metadata] keys in one file still load (`load_dataset("json")`)."""
    from datasets import load_dataset

    code, lines, _ = export(jobs, capsys=capsys)
    assert code == 0
    dataset = load_dataset("json", data_files=str(jobs.parent / "out.jsonl"), split="train",
                           cache_dir=str(jobs.parent / "cache"))
    assert len(dataset) == 4 and dataset[2]["task"]["category"] == "files" and dataset[0]["task"]["family"]
