"""Each reward-hacking signal (docs/signals.md) raised on a constructed archive, and quiet on a healthy one."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from testkit.console_archive import Tokens, record, tool_rollout, write_job
from veri.archive import JobArchive, step_metrics
from veri.archive.signals import detect_archive
from veri.core.signals import SignalsConfig
from veri.services.console.app import create_app
from veri.services.console.settings import ConsoleSettings

pytestmark = pytest.mark.needs("app")


def _archive(root: Path, name: str, lines: list[dict], records_per_step=None) -> Path:
    """A job folder whose steps have `lines` as metrics (on top of the records' own figures)."""
    with JobArchive(root, name) as archive:
        archive.start_job(model="m", max_steps=len(lines), config={"model": "m"})
        for step, extra in enumerate(lines):
            records = records_per_step(step) if records_per_step else []
            for item in records:
                archive.write_rollout(step, item, harness_log="")
            archive.write_step_metrics(step, step_metrics(records, {"rollout": 1.0}) | extra)
    return root / name


def _signals(job_dir: Path, **thresholds) -> dict[str, list]:
    found: dict[str, list] = {}
    for raised in detect_archive(job_dir, SignalsConfig(**thresholds)):
        found.setdefault(raised.signal, []).append(raised)
    return found


def test_a_healthy_job_raises_nothing(tmp_path, tiny_model):
    write_job(tmp_path, "healthy", tiny_model, steps=5).close()
    assert _signals(tmp_path / "healthy") == {}
    # its rollouts' output folders hold only what the task expects
    for step_dir in (tmp_path / "healthy" / "outputs",):
        for task in range(3):
            for index in range(2):
                (step_dir / f"r-{task}-{index}").mkdir(parents=True, exist_ok=True)
                (step_dir / f"r-{task}-{index}" / "answer.txt").write_text("x")
    assert _signals(tmp_path / "healthy", expected_outputs=["answer.txt"]) == {}


def test_held_out_falling_while_training_reward_rises(tmp_path):
    lines = [{"reward/mean": 0.2, "eval/reward/mean": 0.5}, {"reward/mean": 0.4}, {"reward/mean": 0.6,
             "eval/reward/mean": 0.3}]
    (raised,) = _signals(_archive(tmp_path, "job", lines))["held_out_falling"]
    assert raised.step == 2 and "held-out reward fell -0.200" in raised.message
    steady = [{"reward/mean": 0.2, "eval/reward/mean": 0.5}, {"reward/mean": 0.6, "eval/reward/mean": 0.6}]
    assert "held_out_falling" not in _signals(_archive(tmp_path, "steady", steady))


def test_one_answer_across_different_tasks(tmp_path, tiny_model):
    tok = Tokens(tiny_model)

    def collapsed(step: int):
        answer = "42" if step == 1 else None
        return [record(task, i, tool_rollout(tok, task, i, answer or f"answer {task}-{i}", step), reward=1.0)
                for task in range(3) for i in range(2)]

    (raised,) = _signals(_archive(tmp_path, "job", [{}, {}], collapsed))["answer_collapse"]
    assert raised.step == 1 and "6 of 6 rollouts over 3 different tasks" in raised.message and "'42'" in raised.message
    named = {(r["task_index"], r["rollout_index"]) for r in raised.rollouts}
    assert named == {(t, i) for t in range(3) for i in range(2)}


def test_sampled_length_drifting_from_the_first_steps(tmp_path):
    lines = [{"rollouts": 4, "tokens/completion": 400}] * 3 + [{"rollouts": 4, "tokens/completion": 1000},
                                                                 {"rollouts": 4, "tokens/completion": 500}]
    job = _archive(tmp_path, "job", lines)
    (raised,) = _signals(job)["length_drift"]
    assert raised.step == 3 and "2.50x" in raised.message
    assert "length_drift" not in _signals(job, length_ratio=3.0)


def test_tool_call_parse_failures_rising(tmp_path):
    lines = [{"tool_calls/parse_failure_rate": 0.05}] * 3 + [{"tool_calls/parse_failure_rate": 0.4}]
    (raised,) = _signals(_archive(tmp_path, "job", lines))["parse_failures_rising"]
    assert raised.step == 3 and "40% of calls, up from 5%" in raised.message
    quiet = [{"tool_calls/parse_failure_rate": 0.05}] * 3 + [{"tool_calls/parse_failure_rate": 0.1}]
    assert "parse_failures_rising" not in _signals(_archive(tmp_path, "quiet", quiet))


def test_files_the_task_does_not_expect_in_the_reward_s_inputs(tmp_path, tiny_model):
    tok = Tokens(tiny_model)
    job = _archive(tmp_path, "job", [{}], lambda step: [record(0, i, tool_rollout(tok, 0, i, f"a{i}", step), reward=1.0)
                                                        for i in range(2)])
    for i in range(2):
        (job / "outputs" / f"r-0-{i}").mkdir(parents=True)
        (job / "outputs" / f"r-0-{i}" / "answer.txt").write_text("a")
    (job / "outputs" / "r-0-1" / "reward_override.json").write_text("{}")
    assert _signals(job) == {}  # not checked unless the job says what to expect
    (raised,) = _signals(job, expected_outputs=["answer.txt"])["unexpected_outputs"]
    assert "reward_override.json" in raised.message and [r["rollout_index"] for r in raised.rollouts] == [1]


def test_the_job_page_shows_the_signals_with_their_rollouts(tmp_path, tiny_model):
    tok = Tokens(tiny_model)
    (tmp_path / "jobs").mkdir()
    _archive(tmp_path / "jobs", "hacked", [{}], lambda step: [
        record(task, 0, tool_rollout(tok, task, 0, "42", step), reward=1.0) for task in range(3)])
    write_job(tmp_path / "jobs", "healthy", tiny_model, steps=2).close()
    client = TestClient(create_app(ConsoleSettings(state_dir=tmp_path)), base_url="http://127.0.0.1")
    (raised,) = client.get("/api/jobs/hacked/signals").json()
    assert raised["signal"] == "answer_collapse" and len(raised["rollouts"]) == 3
    page = client.get("/jobs/hacked").text
    assert 'data-signal="answer_collapse"' in page and "/jobs/hacked/steps/0/tasks/2/rollouts/0" in page
    assert client.get("/api/jobs/healthy/signals").json() == []
    assert 'id="no-signals"' in client.get("/jobs/healthy").text
