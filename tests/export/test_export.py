"""`veri export sft JOB`: the archive's trained rows, token for token, with their masks; the filters; the refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.export.archive import JOB, steps, write_archive
from veri.archive import ArchiveLayout, read_rollout
from veri.cli import main
from veri.tools.export.errors import ExportError
from veri.tools.export.rows import parse_steps, resolve_job, sft_lines


@pytest.fixture
def jobs(tmp_path: Path) -> Path:
    write_archive(tmp_path / "jobs")
    return tmp_path / "jobs"


def export(jobs: Path, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[dict], str]:
    out = jobs.parent / "out.jsonl"
    out.unlink(missing_ok=True)
    code = main(["export", "sft", JOB, "--output", str(jobs), "--out", str(out), *args])
    captured = capsys.readouterr()
    lines = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return code, lines, captured.out + captured.err


def test_rows_match_the_archive_token_for_token(jobs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, printed = export(jobs, capsys=capsys)
    assert code == 0, printed
    layout = ArchiveLayout(jobs / JOB)
    expected = []
    for step, path in layout.rollout_files():
        record = read_rollout(path)
        if step < 3 and record.trainable:
            expected += [(step, record, position, row) for position, row in enumerate(record.episode.rows)]
    assert len(lines) == len(expected) == 6  # steps 0 (2), 1 (main + side call), 2 (2); step 3 incomplete
    for line, (step, record, position, row) in zip(lines, expected, strict=True):
        assert line["input_ids"] == row.prompt_ids + row.completion_ids
        assert line["completion_mask"] == [0] * len(row.prompt_ids) + row.env_mask
        assert (line["step"], line["task_index"], line["rollout_index"], line["row"]) == (
            step, record.task_index, record.rollout_index, position)
        assert line["reward"] == record.reward.reward
        assert line["job"] == JOB and line["rollout_id"] == record.rollout_id
    first = lines[0]  # two bridged turns: prompt 3, sampled 3, environment 3, sampled 2
    assert first["completion_mask"] == [0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1]
    assert first["messages"][-1] == {"role": "assistant", "content": "reply 1"}
    side = [line for line in lines if line["step"] == 1]
    assert [line["row_kind"] for line in side] == ["main", "side_call"]
    assert side[0]["input_ids"] == [1, 2, 3, 99, 5, 6, 99] and side[0]["completion_mask"] == [0, 0, 1, 1, 0, 1, 1]
    assert side[1]["input_ids"] == [7, 8, 9, 99] and side[1]["completion_mask"] == [0, 0, 1, 1]
    assert side[1]["messages"][0]["content"] == "You write short titles."
    assert side[1]["messages"][-1]["content"] == "a title"
    # every sampled token trained by GRPO is trained here once: the mask's ones are the records' trained tokens
    trained = sum(record.tokens.trained for step, records in steps().items() if step < 3 for record in records)
    assert sum(sum(line["completion_mask"]) for line in lines) == trained
    assert "6 rows" in printed and "step_incomplete 1" in printed and "not_trained 2" in printed


def test_min_reward_and_steps_filter(jobs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, _ = export(jobs, "--min-reward", "1", capsys=capsys)
    assert code == 0 and [(line["step"], line["task_index"]) for line in lines] == [(0, 0), (2, 3)]
    assert all(line["reward"] >= 1 for line in lines)
    code, lines, _ = export(jobs, "--steps", "1:3", capsys=capsys)
    assert code == 0 and sorted({line["step"] for line in lines}) == [1, 2]
    code, lines, _ = export(jobs, "--steps", "2", "--min-reward", "0.5", capsys=capsys)
    assert code == 0 and [(line["step"], line["reward"]) for line in lines] == [(2, 1.0)]
    code, lines, printed = export(jobs, "--steps", ":1", "--json", capsys=capsys)
    assert code == 0 and json.loads(printed)["rows"] == 2 and json.loads(printed)["steps"] == [0]


@pytest.mark.parametrize(("args", "says"), [
    (["--min-reward", "2"], "lower --min-reward"),
    (["--steps", "5:9"], "selects no completed step"),
    (["--steps", "3:"], "selects no completed step"),  # step 3 has rollouts but was never completed
    (["--steps", "x"], "give --steps as a:b"),
    (["--steps", "4:2"], "b must be greater than a"),
    (["--steps=-1:"], "steps start at 0"),
    (["--min-reward", "nan"], "finite number"),
])
def test_refusals_name_the_fix(jobs: Path, capsys: pytest.CaptureFixture[str], args: list[str], says: str) -> None:
    code, lines, printed = export(jobs, *args, capsys=capsys)
    assert code == 1 and lines == [] and says in printed and "Traceback" not in printed
    assert not list(jobs.parent.glob(".out.jsonl*"))  # no temp file left behind


def test_unknown_job_and_not_an_archive(jobs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ExportError, match=f"no job 'nope' in .*jobs there: {JOB}.*--output"):
        resolve_job("nope", jobs)
    (tmp_path / "plain").mkdir()
    with pytest.raises(ExportError, match="not a job archive"):
        resolve_job(str(tmp_path / "plain"), jobs)
    assert resolve_job(str(jobs / JOB), tmp_path / "elsewhere").dir == (jobs / JOB).resolve()
    assert main(["export", "sft", "nope", "--output", str(jobs)]) == 1
    assert "veri export sft: no job 'nope'" in capsys.readouterr().err


def test_a_job_without_a_completed_step(tmp_path: Path) -> None:
    from veri.archive import JobArchive
    from veri.tools.export.rows import export_sft

    with JobArchive(tmp_path, "young") as archive:
        archive.write_rollout(0, steps()[0][0])
    with pytest.raises(ExportError, match="no completed step"):
        export_sft(ArchiveLayout(tmp_path / "young"), tmp_path / "out.jsonl")


def test_parse_steps() -> None:
    assert (parse_steps("2:5").start, parse_steps("2:5").stop) == (2, 5)
    assert 4 in parse_steps("2:5") and 5 not in parse_steps("2:5") and 1 not in parse_steps("2:5")
    assert 100 in parse_steps("3:") and 0 in parse_steps(":1") and 7 in parse_steps(None)
    assert list(filter(parse_steps("7").__contains__, range(10))) == [7]


def test_lines_are_a_dataset_trl_reads(jobs: Path) -> None:
    """The exported file loads as a datasets JSON dataset (what a user passes to their own SFTTrainer)."""
    from datasets import load_dataset

    out = jobs.parent / "rows.jsonl"
    out.write_text("".join(json.dumps(line) + "\n" for line in sft_lines(ArchiveLayout(jobs / JOB))))
    dataset = load_dataset("json", data_files=str(out), split="train")
    assert {"input_ids", "completion_mask", "messages", "step", "row_kind"} <= set(dataset.column_names)
    assert len(dataset) == 6
