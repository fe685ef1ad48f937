"""The job archive: layout, atomic writes, metrics, the SQLite index, rebuild, resume, TensorBoard/W&B."""

from __future__ import annotations

import json
import math
import os
import sqlite3
import sys
import time
import types
from pathlib import Path

import pytest

from testkit.spans import bridged_chain, make_span
from veri.archive import (
    ArchiveIndex,
    ArchiveInUse,
    JobArchive,
    checkpoint_step,
    latest_checkpoint,
    prepare_resume,
    read_metrics,
    read_rollout,
    rebuild_index,
    step_metrics,
)
from veri.core.episodes import RolloutStatus, build_episode
from veri.core.records import ToolCallFailure
from veri.core.rollout_record import RewardOutcome, RolloutRecord
from veri.core.rules import Rule, Verdict
from veri.services.trainer.errors import JobError
from veri.tools.harness.debug import explain, read_records

TIMINGS = {"rollout": 2.0, "reward": 0.5, "train": 1.0, "weight_sync": 0.25}


def record(task: int, index: int, spans: list, *, status=RolloutStatus.COMPLETED, reward: float | None = None,
           scored: bool = True, reward_error: bool = False, step: int | None = None) -> RolloutRecord:
    outcome = None
    if reward_error:
        verdict = Verdict.of(Rule.REWARD_ERROR, "reward 'match' raised KeyError('url')")
        outcome = RewardOutcome(reward=None, per_function={"match": None}, verdicts=[verdict])
    elif scored:
        outcome = RewardOutcome(reward=reward, per_function={"match": reward})
    exit_code = {RolloutStatus.FAILED: 1, RolloutStatus.COMPLETED: 0}.get(status)
    return RolloutRecord(
        rollout_id=f"r-{task}-{index}", task_index=task, rollout_index=index, policy_step=step,
        task={"prompt": f"task {task}"}, status=status, exit_code=exit_code, spans=spans,
        episode=build_episode(spans, status, exit_code=exit_code), reward=outcome,
    )


def batch() -> list[RolloutRecord]:
    """Six rollouts over two tasks: trained, masked by each rule, degraded."""
    side = [make_span(0, [1, 2], [3, 99], version=1), make_span(1, [7, 8], [9, 99], version=1),
            make_span(2, [1, 2, 3, 99, 5], [6, 99], version=1)]
    return [
        record(0, 0, bridged_chain(), reward=1.0),  # row: prompt 3, sampled 7, environment 3
        record(0, 1, [make_span(0, [1, 2], [3, 99])], reward=0.0),
        record(0, 2, [make_span(0, [5, 6], [7, 99])], status=RolloutStatus.FAILED, scored=False),  # masked
        record(1, 0, [make_span(0, [8], [9, 99])], reward_error=True),  # masked: reward_error
        record(1, 1, [], status=RolloutStatus.TRUNCATED, scored=False),  # no_spans + harness_timeout
        record(1, 2, side, reward=0.5),  # a side call: two rows, both trained
    ]


@pytest.fixture
def archive(tmp_path: Path):
    with JobArchive(tmp_path / "archive", "job-1") as opened:
        yield opened


def write_step(archive: JobArchive, step: int, records: list[RolloutRecord] | None = None) -> list[RolloutRecord]:
    records = batch() if records is None else records
    for item in records:
        archive.write_rollout(step, item)
    archive.write_step_metrics(step, step_metrics(records, TIMINGS))
    return records


def temp_files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.name.endswith(".tmp")]


def index_tables(index: Path) -> tuple[list, list]:
    db = sqlite3.connect(index)
    try:
        rollouts = db.execute("SELECT * FROM rollouts ORDER BY step, task_index, rollout_index").fetchall()
        steps = db.execute("SELECT step, metrics FROM steps ORDER BY step").fetchall()
    finally:
        db.close()
    return rollouts, steps


# --- layout and atomic writes ------------------------------------------------------------------------


def test_layout_and_atomic_rollout_files(archive: JobArchive, tmp_path: Path):
    item = record(1, 2, bridged_chain(), reward=1.0)
    path = archive.write_rollout(0, item, harness_log="stdout tail\n")
    assert path == tmp_path / "archive" / "job-1" / "trajectories" / "step-0" / "task-1" / "rollout-2.json"
    assert path.with_suffix(".log").read_text() == "stdout tail\n"
    stored = read_rollout(path)
    assert stored.policy_step == 0  # filled in from the step
    assert stored.model_dump(exclude={"policy_step"}) == item.model_dump(exclude={"policy_step"})
    assert stored.episode.row.env_mask == [1, 1, 1, 0, 0, 1, 1, 0, 1, 1]  # ids, mask, logprobs all kept
    assert temp_files(archive.dir) == []
    # `veri debug` reads an archived rollout file as it is.
    assert "result: TRAINED on 3 of 3 spans" in explain(read_records(path)[0])

    with pytest.raises(ValueError, match="policy_step 5"):
        archive.write_rollout(0, record(0, 0, bridged_chain(), reward=1.0, step=5))


def test_a_failed_write_leaves_the_old_file_and_no_temp(archive: JobArchive, monkeypatch: pytest.MonkeyPatch):
    path = archive.write_rollout(0, record(0, 0, bridged_chain(), reward=1.0))
    before = path.read_bytes()

    def crash(*args):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk gone"):
        archive.write_rollout(0, record(0, 0, bridged_chain(), reward=0.0))
    assert path.read_bytes() == before and temp_files(archive.dir) == []


def test_temp_files_from_a_crash_do_not_break_anything(tmp_path: Path):
    root = tmp_path / "archive"
    folder = root / "job-1" / "trajectories" / "step-0" / "task-0"
    folder.mkdir(parents=True)
    stale = folder / ".rollout-0.json.k3j2x.tmp"
    stale.write_text('{"rollout_id": "half')  # a crash mid-write
    with JobArchive(root, "job-1") as archive:
        assert not stale.exists()  # swept on open: no writer can be running (the lock says so)
        assert archive.rollouts() == []  # never indexed
        assert "temp file" in archive.layout.train_log.read_text()
        folder.joinpath(".rollout-0.json.abcde.tmp").write_text("junk")  # same prefix, not in the way
        archive.write_rollout(0, record(0, 0, bridged_chain(), reward=1.0))
        assert [row["path"] for row in archive.rollouts()] == ["trajectories/step-0/task-0/rollout-0.json"]
    assert rebuild_index(root / "job-1").unreadable == []


def test_one_writer_per_archive(archive: JobArchive, tmp_path: Path):
    with pytest.raises(ArchiveInUse, match="another trainer"):
        JobArchive(tmp_path / "archive", "job-1")
    with pytest.raises(JobError, match="job name"):
        JobArchive(tmp_path / "archive", "../escape")


def test_log_lines_are_json_events(archive: JobArchive):
    archive.log("step 0 done", step=0)
    archive.log("two\nlines", level="warning")
    lines = archive.layout.train_log.read_text().splitlines()
    first, second = (json.loads(line) for line in lines[-2:])
    assert first["timestamp"].endswith("Z") and first["timestamp"][:4].isdigit()
    assert (first["level"], first["service"], first["event"], first["step"]) == ("info", "trainer", "step 0 done", 0)
    assert (second["level"], second["event"]) == ("warning", "two\nlines")


# --- metrics -----------------------------------------------------------------------------------------


def test_step_metrics_of_a_crafted_batch():
    metrics = step_metrics(batch(), TIMINGS)
    expected = {
        "rollouts": 6, "trainable": 3, "masked": 3,
        "reward/scored": 3, "reward/mean": 0.5, "reward/min": 0.0, "reward/max": 1.0,
        "reward_fn/match/mean": 0.5,
        "status/completed": 4, "status/failed": 1, "status/truncated": 1,
        **{f"rule/{rule.value}": 0 for rule in Rule},  # every rule, zeros included
        "rule/no_spans": 1, "rule/harness_failed": 1, "rule/harness_timeout": 1,
        "rule/reward_error": 1,
        # the side call is a row of its own (prompt 2, sampled 2) next to its rollout's main row
        "tokens/prompt": 3 + 2 + 2 + 1 + 2 + 2, "tokens/completion": 7 + 2 + 2 + 2 + 4 + 2,
        "tokens/environment": 3 + 1, "tokens/trainable_completion": 7 + 2 + 4 + 2, "tokens/completion_mean": 19 / 6,
        "tokens/dropped_fraction": (2 + 2) / 19,  # the failed and the reward_error rollouts' sampled tokens
        "rows/per_rollout": 6 / 6,
        "turns/mean": 9 / 6, "turns/max": 3,
        "tool_calls/attempted": 0, "tool_calls/parse_failed": 0, "rollouts/with_parse_failures": 0,
        **{f"tool_calls/parse_failed/{kind.value}": 0 for kind in ToolCallFailure},  # no rate: nothing attempted
        "policy_version/min": 0, "policy_version/max": 1, "policy_version/distinct": 2,
        "time/rollout_s": 2.0, "time/reward_s": 0.5, "time/train_s": 1.0, "time/weight_sync_s": 0.25,
        "time/step_s": 3.75,
    }
    assert metrics.pop("reward/std") == pytest.approx(math.sqrt(1 / 6))
    assert metrics == pytest.approx(expected) and set(metrics) == set(expected)
    assert {key for key in metrics if key.startswith("rule/")} == {f"rule/{rule.value}" for rule in Rule}


def test_step_metrics_without_scored_rollouts_leaves_undefined_values_out():
    metrics = step_metrics([record(0, 0, [], status=RolloutStatus.TRUNCATED, scored=False)], {"step": 9.0})
    assert metrics["reward/scored"] == 0 and "reward/mean" not in metrics and "reward/std" not in metrics
    assert metrics["rule/no_spans"] == 1 and metrics["time/step_s"] == 9.0 and "time/step_s_s" not in metrics
    assert all(isinstance(value, int | float) for value in metrics.values())


def test_metrics_jsonl_survives_a_partial_last_line(tmp_path: Path):
    root = tmp_path / "archive"
    with JobArchive(root, "job-1") as archive:
        write_step(archive, 0)
        archive.write_step_metrics(1, {"reward/mean": 0.25, "loss": float("nan")})
    metrics_file = root / "job-1" / "metrics.jsonl"
    with open(metrics_file, "a") as handle:
        handle.write('{"step": 2, "reward/me')  # the crash hit mid-append
    assert [line["step"] for line in read_metrics(metrics_file)] == [0, 1]
    assert read_metrics(metrics_file)[1]["loss"] is None  # non-finite values are written as null

    with JobArchive(root, "job-1") as archive:
        assert archive.last_completed_step() == 1
        assert "partial line" in archive.layout.train_log.read_text()
        archive.write_step_metrics(2, {"reward/mean": 0.75})
        with ArchiveIndex(archive.dir) as index:  # the console's reader
            assert [line["step"] for line in index.metrics()] == [0, 1, 2]
    lines = metrics_file.read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [0, 1, 2]  # every line parses


# --- the index ---------------------------------------------------------------------------------------


def test_index_rows_and_filters(archive: JobArchive):
    write_step(archive, 0)
    archive.write_rollout(1, record(0, 0, bridged_chain(), reward=1.0))  # step 1 in progress

    first = archive.rollouts(step=0, limit=1)[0]
    assert first == {
        "step": 0, "task_index": 0, "rollout_index": 0, "rollout_id": "r-0-0", "status": "completed",
        "reward": 1.0, "trainable": True, "verdicts": [], "turns": 3, "prompt_tokens": 3,
        "completion_tokens": 7, "environment_tokens": 3, "policy_version": 0, "policy_versions": "0",
        "path": "trajectories/step-0/task-0/rollout-0.json", "final_answer": "",
    }
    assert archive.read_rollout(first["path"]).rollout_id == "r-0-0"
    with pytest.raises(ValueError, match="outside the archive"):
        archive.read_rollout("../../../etc/passwd")

    def ids(rows: list[dict]) -> list[str]:
        return [row["rollout_id"] for row in rows]

    assert len(archive.rollouts()) == 7 and len(archive.rollouts(step=0)) == 6
    assert ids(archive.rollouts(status="failed")) == ["r-0-2"]
    assert ids(archive.rollouts(rule=Rule.REWARD_ERROR)) == ["r-1-0"]
    assert ids(archive.rollouts(rule="harness_timeout")) == ["r-1-1"]
    truncated = archive.rollouts(rule="no_spans")[0]
    assert truncated["verdicts"] == ["harness_timeout", "no_spans"] and truncated["policy_version"] is None
    assert archive.rollouts(rule="history_rewritten") == []  # a side call is a row of its own now
    (side,) = [row for row in archive.rollouts(step=0) if row["rollout_id"] == "r-1-2"]
    assert side["trainable"] and side["reward"] == 0.5 and side["policy_version"] == 1
    assert ids(archive.rollouts(step=0, trainable=True)) == ["r-0-0", "r-0-1", "r-1-2"]
    assert ids(archive.rollouts(step=0, limit=2, offset=2)) == ["r-0-2", "r-1-0"]
    assert archive.rollouts(step=0, status="completed", rule="reward_error")[0]["reward"] is None

    steps = archive.list_steps()
    assert [(s["step"], s["complete"], s["rollouts"]) for s in steps] == [(0, True, 6), (1, False, 1)]
    assert steps[0]["metrics"]["rule/reward_error"] == 1 and steps[1]["metrics"] is None
    with ArchiveIndex(archive.dir) as index:
        assert index.count_rollouts(step=0, trainable=False) == 3


def test_rebuild_from_the_files_gives_the_same_rows(tmp_path: Path):
    root = tmp_path / "archive"
    with JobArchive(root, "job-1") as archive:
        write_step(archive, 0)
        write_step(archive, 1, batch()[:4])
        archive.write_rollout(2, record(0, 0, bridged_chain(), reward=1.0))
        folder = archive.dir
    before = index_tables(folder / "index.sqlite")
    assert len(before[0]) == 11 and len(before[1]) == 2

    (folder / "index.sqlite").unlink()
    report = rebuild_index(folder)
    assert (report.rollouts, report.steps, report.unreadable) == (11, 2, [])
    assert index_tables(folder / "index.sqlite") == before

    (folder / "index.sqlite").unlink()  # a writer that opens without an index rebuilds it
    with JobArchive(root, "job-1"):
        pass
    assert index_tables(folder / "index.sqlite") == before

    (folder / "index.sqlite").write_bytes(b"not a database at all" * 100)  # damaged: rebuilt too
    with JobArchive(root, "job-1") as archive:
        assert "rebuilding" in archive.layout.train_log.read_text()
    assert index_tables(folder / "index.sqlite") == before


def test_a_rollout_file_written_before_a_crash_reaches_the_index(tmp_path: Path):
    root = tmp_path / "archive"
    with JobArchive(root, "job-1") as archive:
        write_step(archive, 0)
        path = archive.write_rollout(1, record(0, 0, bridged_chain(), reward=1.0))
        db = sqlite3.connect(archive.layout.index)
        with db:
            db.execute("DELETE FROM rollouts WHERE step = 1")  # as if the process died before the upsert
        db.close()
    with JobArchive(root, "job-1") as archive:
        assert [row["path"] for row in archive.rollouts(step=1)] == [archive.layout.relative(path)]


# --- resume ------------------------------------------------------------------------------------------


def test_resume_sets_the_partial_step_aside(tmp_path: Path):
    root = tmp_path / "archive"
    with JobArchive(root, "job-1") as archive:
        write_step(archive, 0)
        write_step(archive, 1)
        for item in batch()[:3]:  # step 2 stopped mid-way: rollouts, no metrics
            archive.write_rollout(2, item)
        archive.write_timeline(2, {"wall_s": 2.0})  # stopped between its timeline and its metrics line

    with JobArchive(root, "job-1") as archive:
        assert archive.last_completed_step() == 1
        assert len(archive.rollouts(step=2)) == 3
        assert archive.discard_incomplete_steps() == [2]
        assert not archive.layout.step_dir(2).exists()
        assert read_metrics(archive.layout.timeline) == []
        assert [line["step"] for line in read_metrics(archive.layout.incomplete / "timeline.jsonl")] == [2]
        aside = archive.layout.incomplete / "step-2" / "task-0"
        assert sorted(p.name for p in aside.iterdir()) == ["rollout-0.json", "rollout-1.json", "rollout-2.json"]
        assert archive.rollouts(step=2) == [] and [s["step"] for s in archive.list_steps()] == [0, 1]
        assert archive.discard_incomplete_steps() == []  # nothing more to set aside

        with pytest.raises(ValueError, match="already complete"):
            archive.write_rollout(1, record(0, 0, bridged_chain(), reward=1.0))
        with pytest.raises(ValueError, match="already complete"):
            archive.write_step_metrics(1, {"reward/mean": 1.0})
        with pytest.raises(ValueError, match="already complete"):
            archive.write_timeline(1, {"wall_s": 1.0})
        write_step(archive, 2)  # the resumed run re-samples step 2
        for item in batch()[:1]:  # and stops mid-way again
            archive.write_rollout(3, item)
    with JobArchive(root, "job-1") as archive:
        assert archive.discard_incomplete_steps() == [3]
        assert (archive.layout.incomplete / "step-3").is_dir()
        assert [s["step"] for s in archive.list_steps()] == [0, 1, 2]
        assert index_tables(archive.layout.index)[0] == _rebuilt_rows(archive.dir)


def _rebuilt_rows(folder: Path) -> list:
    copy = folder.parent / "copy"
    copy.mkdir()
    (copy / "trajectories").symlink_to(folder / "trajectories")
    (copy / "metrics.jsonl").write_bytes((folder / "metrics.jsonl").read_bytes())
    rebuild_index(copy)
    return index_tables(copy / "index.sqlite")[0]


def write_checkpoint(output_dir: Path, step: int, *, complete: bool = True, state: str | None = None) -> Path:
    folder = output_dir / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"weights")
    if complete:
        (folder / "trainer_state.json").write_text(state or json.dumps({"global_step": step}))
    return folder


def test_latest_checkpoint_skips_incomplete_ones(tmp_path: Path):
    output = tmp_path / "output"
    assert latest_checkpoint(output) is None
    write_checkpoint(output, 2)
    ten = write_checkpoint(output, 10)
    write_checkpoint(output, 12, complete=False)  # killed mid-save: trainer_state.json comes last
    write_checkpoint(output, 14, state='{"global_step": 1')  # cut off while writing trainer_state.json
    (output / "checkpoint-final").mkdir()
    assert latest_checkpoint(output) == ten and checkpoint_step(ten) == 10


def test_prepare_resume_lines_the_archive_up_with_the_checkpoint(tmp_path: Path):
    root, output = tmp_path / "archive", tmp_path / "output"
    with JobArchive(root, "job-1") as archive:
        for step in range(4):
            write_step(archive, step, batch()[:2])
        archive.write_rollout(4, batch()[0])
    checkpoint = write_checkpoint(output, 2)  # saved after steps 0 and 1 were trained on

    with JobArchive(root, "job-1") as archive:
        assert prepare_resume(archive, output) == checkpoint
        assert archive.last_completed_step() == 1  # the resumed run samples step 2 next
        assert [line["step"] for line in archive.metrics()] == [0, 1]
        assert [line["step"] for line in read_metrics(archive.layout.incomplete / "metrics.jsonl")] == [2, 3]
        assert sorted(p.name for p in archive.layout.incomplete.iterdir() if p.is_dir()) == [
            "step-2", "step-3", "step-4"]
        assert {row["step"] for row in archive.rollouts()} == {0, 1}
        write_step(archive, 2, batch()[:2])
        assert "resume from checkpoint" in archive.layout.train_log.read_text()

    with JobArchive(root, "job-1") as archive:  # no checkpoint at all: start over, everything aside
        assert prepare_resume(archive, tmp_path / "nothing") is None
        assert archive.last_completed_step() is None and archive.list_steps() == []
        assert (archive.layout.incomplete / "step-2~2").is_dir()  # the earlier step-2 is kept too


# --- TensorBoard and W&B -----------------------------------------------------------------------------


def test_tensorboard_event_file_is_written(tmp_path: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    root = tmp_path / "archive"
    with JobArchive(root, "job-1") as archive:
        write_step(archive, 0)
        archive.write_step_metrics(1, {"reward/mean": 0.25, "loss": float("inf")})
    events = list((root / "job-1" / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1
    accumulator = EventAccumulator(str(events[0].parent))
    accumulator.Reload()
    assert [(e.step, e.value) for e in accumulator.Scalars("reward/mean")] == [(0, 0.5), (1, 0.25)]
    assert "rule/reward_error" in accumulator.Tags()["scalars"] and "loss" not in accumulator.Tags()["scalars"]

    time.sleep(1.1)  # event files sort by name (unix seconds first); a resumed run starts later in real life
    with JobArchive(root, "job-1") as archive:  # resumed from a checkpoint at step 1: step 1 runs again
        assert archive.discard_incomplete_steps(after=0) == [1]
        archive.write_step_metrics(1, {"reward/mean": 0.75})
    accumulator = EventAccumulator(str(events[0].parent))
    accumulator.Reload()
    assert [(e.step, e.value) for e in accumulator.Scalars("reward/mean")] == [(0, 0.5), (1, 0.75)]


def test_wandb_gets_metrics_when_a_key_is_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    calls: list = []

    class Run:
        def log(self, data, step):
            calls.append(("log", step, data))

        def finish(self):
            calls.append(("finish",))

    def init(**kwargs):
        calls.append(("init", kwargs))
        return Run()

    fake = types.SimpleNamespace(init=init, util=types.SimpleNamespace(generate_id=lambda: "abc123"))
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.setenv("WANDB_API_KEY", "k")
    root = tmp_path / "archive"
    for step in (0, 1):  # two sessions: the second resumes the same run
        with JobArchive(root, "job-1") as archive:
            archive.write_step_metrics(step, {"reward/mean": 0.5})
    inits = [c[1] for c in calls if c[0] == "init"]
    assert [(i["id"], i["resume"], i["name"]) for i in inits] == [("abc123", "allow", "job-1")] * 2
    assert [(c[1], c[2]) for c in calls if c[0] == "log"] == [(0, {"reward/mean": 0.5}), (1, {"reward/mean": 0.5})]

    monkeypatch.delenv("WANDB_API_KEY")
    calls.clear()
    with JobArchive(root, "job-1") as archive:
        archive.write_step_metrics(2, {"reward/mean": 0.5})
    assert calls == []


# --- the console's queries and job.json --------------------------------------------------------------


def test_search_filters_sorts_and_finds(archive: JobArchive):
    from veri.archive import RolloutQuery

    answers = ["the URL is https://a.example/x", "no idea", "100% sure: b_c"]
    for step in range(3):
        for task, text in enumerate(answers):
            spans = [make_span(0, [1, 2], [3, 99], reply=text)]
            archive.write_rollout(step, record(task, 0, spans, reward=float(task + step)))
        archive.write_step_metrics(step, {"rollouts": 3})
    with ArchiveIndex(archive.dir) as index:
        def keys(query: RolloutQuery) -> list[tuple[int, int]]:
            return [(row["step"], row["task_index"]) for row in index.search(query)]

        in_range = RolloutQuery(step_min=1, step_max=2, reward_min=2, reward_max=3)
        assert keys(in_range) == [(1, 1), (1, 2), (2, 0), (2, 1)]
        assert keys(RolloutQuery(text="URL IS")) == [(0, 0), (1, 0), (2, 0)]
        assert keys(RolloutQuery(text="%")) == [(0, 2), (1, 2), (2, 2)]  # LIKE wildcards are literal
        assert keys(RolloutQuery(text="b_c", step_min=2)) == [(2, 2)]
        assert keys(RolloutQuery(task_index=1, sort="reward", descending=True)) == [(2, 1), (1, 1), (0, 1)]
        assert index.count(RolloutQuery(step_min=1)) == 6
        assert index.find(2, 1, 0)["reward"] == 3.0 and index.find(9, 0, 0) is None
        assert index.step_range() == (0, 2) and index.task_indexes() == [0, 1, 2]
        assert index.search(RolloutQuery(step_min=0, step_max=0))[2]["final_answer"] == "100% sure: b_c"
        with pytest.raises(ValueError, match="outside the archive"):
            index.read_rollout("trajectories/../../job-2/x.json")
    with pytest.raises(ValueError, match="use one of step, reward"):
        RolloutQuery(sort="nonsense")


def test_text_search_is_a_substring_through_the_full_text_index(archive: JobArchive):
    from veri.archive import RolloutQuery
    from veri.archive.index import index_row
    from veri.archive.index_writer import IndexWriter

    answers = ['He said "go" at 10:30; see a*b.', "École fermée", "the URL is https://a.example/x", "ok"]
    for task, text in enumerate(answers):
        archive.write_rollout(0, record(task, 0, [make_span(0, [1, 2], [3, 99], reply=text)], reward=1.0))
    with ArchiveIndex(archive.dir) as index:
        def tasks(text: str, **more) -> list[int]:
            return [row["task_index"] for row in index.search(RolloutQuery(text=text, **more))]

        plan = " ".join(row[-1] for row in index.db.execute(
            f"EXPLAIN QUERY PLAN SELECT * FROM rollouts{RolloutQuery(text='url').where()[0]}", ["\"url\""]))
        assert "VIRTUAL TABLE INDEX" in plan  # the text goes through answers, not a scan of final_answer
        assert tasks("rl is https://a.ex") == [2]  # inside words, across spaces and punctuation
        assert tasks("URL") == [2] and tasks("url", step_min=1) == []  # with the other filters
        assert tasks('"go"') == [0] and tasks('said "go" at') == [0]  # quotes are plain characters
        assert tasks("a*b") == [0] and tasks("10:30") == [0] and tasks("OR") == []  # no FTS5 syntax
        assert tasks("url  is") == [] and tasks("the url is https://a.example/xy") == []  # exact substring
        assert tasks("éCOLE FERMÉE") == [1]  # case folds beyond A-Z in the index
        assert tasks("ok") == [3] and tasks("OK") == [3] and tasks("k") == [3]  # under 3 characters: a scan
    writer = IndexWriter(archive.dir / "index.sqlite")  # a rewritten rollout and dropped steps leave no trace
    rewritten = record(2, 0, [make_span(0, [1], [3, 99], reply="replaced")])
    writer.upsert_rollout(index_row(0, rewritten, "trajectories/step-0/task-2/rollout-0.json"))
    with ArchiveIndex(archive.dir) as index:
        assert [r["task_index"] for r in index.search(RolloutQuery(text="URL"))] == []
        assert [r["task_index"] for r in index.search(RolloutQuery(text="replaced"))] == [2]
    writer.drop_steps_after(-1)
    writer.db.execute("INSERT INTO answers (answers) VALUES ('integrity-check')")  # raises if out of step
    assert writer.db.execute("SELECT COUNT(*) FROM answers WHERE answers MATCH '\"ole\"'").fetchone()[0] == 0
    writer.close()


def test_an_index_of_the_old_schema_is_refused_by_readers_and_rebuilt_by_the_trainer(tmp_path: Path):
    from veri.archive import IndexOutdated, RolloutQuery

    root = tmp_path / "archive"
    with JobArchive(root, "job-1") as archive:
        write_step(archive, 0)
    db = sqlite3.connect(root / "job-1" / "index.sqlite")  # as schema 2 wrote it: no full-text index
    db.executescript("DROP TRIGGER answers_after_insert; DROP TRIGGER answers_after_delete;"
                     " DROP TRIGGER answers_after_update; DROP TABLE answers; PRAGMA user_version = 2;")
    db.close()
    with pytest.raises(IndexOutdated, match="schema 2, this veri reads 3: rebuild it"):
        ArchiveIndex(root / "job-1")
    with JobArchive(root, "job-1") as archive:  # the trainer rebuilds it from the files
        assert len(archive.rollouts(step=0)) == 6
        archive.write_rollout(1, record(0, 0, [make_span(0, [1, 2], [3, 99], reply="found after the rebuild")]))
    with ArchiveIndex(root / "job-1") as index:
        assert [row["step"] for row in index.search(RolloutQuery(text="AFTER THE REBUILD"))] == [1]


@pytest.mark.parametrize(("raised", "status"), [(None, "finished"), (KeyboardInterrupt, "stopped"),
                                                (RuntimeError, "failed")])
def test_job_file_says_how_the_job_ended(tmp_path: Path, raised, status):
    from veri.archive import ArchiveLayout, job_status, read_job_file

    layout = ArchiveLayout(tmp_path / "job-1")

    def run() -> None:
        with JobArchive(tmp_path, "job-1") as archive:
            archive.start_job(model="build/models/tiny", max_steps=3, config={"max_steps": 3})
            assert job_status(layout) == "running"  # this process holds the writer lock
            if raised:
                raise raised("boom")

    if raised:
        with pytest.raises(raised):
            run()
    else:
        run()
    info = read_job_file(layout)
    assert job_status(layout) == status and info["status"] == status
    assert info["max_steps"] == 3 and info["ended_at"] >= info["started_at"]
    assert (info["error"] == "RuntimeError: boom") == (status == "failed")


def test_a_running_job_whose_trainer_died_reads_failed(tmp_path: Path):
    from veri.archive import ArchiveLayout, job_status
    from veri.archive.status import write_job_start

    layout = ArchiveLayout(tmp_path / "job-1")
    layout.dir.mkdir()
    write_job_start(layout, model="m", max_steps=1, config={})
    assert job_status(layout) == "failed"  # job.json says running, but nobody holds the writer lock
    assert job_status(ArchiveLayout(tmp_path / "none")) is None
