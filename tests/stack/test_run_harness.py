"""`veri run-harness` against the compose stack: the demo bundles in gVisor sandboxes, through the
capture proxy, to the tiny model (what a sandbox can and cannot reach: test_isolation.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.stack.conftest import CLAUDE_TASK, CODEX_TASK, OPENAI_TASK, dataset_row
from veri.core.rollout_record import RolloutRecord

pytestmark = pytest.mark.slow


def records(out: Path, task: int) -> list[RolloutRecord]:
    return [RolloutRecord.model_validate_json(p.read_text()) for p in sorted((out / f"task-{task}").glob("*.json"))]


def run_demo(stack, bundle: str, task: int, out: Path, n: int) -> list[RolloutRecord]:
    done = stack.veri("run-harness", "--bundle", f"harness-bundles/{bundle}", "--dataset",
                      "config/data/url_extract.jsonl", "--index", str(task), "-n", str(n), "--out", str(out),
                      "--no-up", "--max-turns", "4")
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    assert "prompt source per span" in done.stdout
    found = records(out, task)
    assert len(found) == n
    return found


def test_openai_bundle_in_gvisor(stack, tmp_path):
    expected = dataset_row(OPENAI_TASK)["expected_url"]
    for record in run_demo(stack, "url_extract_openai", OPENAI_TASK, tmp_path, n=2):
        assert record.status == "completed", record.episode.verdicts
        assert [s.prompt_source for s in record.spans] == ["full_render", "bridged"]
        assert record.spans[-1].reply_message["content"] == f"ANSWER: {expected}"
        assert record.episode.row is not None and not record.episode.verdicts
    assert (tmp_path / "outputs").exists()


def test_claude_bundle_in_gvisor(stack, tmp_path):
    expected = dataset_row(CLAUDE_TASK)["expected_url"]
    [record] = run_demo(stack, "url_extract_claude", CLAUDE_TASK, tmp_path, n=1)
    assert record.status == "completed", record.episode.verdicts
    assert record.spans[0].reply_message["tool_calls"][0]["function"]["name"] == "Bash"
    assert f"ANSWER: {expected}" in record.spans[-1].reply_message["content"]
    answers = list((tmp_path / "outputs").rglob("answer.txt"))
    assert [a.read_text().strip() for a in answers] == [expected]


def test_codex_bundle_in_gvisor(stack, tmp_path):
    """`codex exec`, unmodified, in the sandbox: the Responses route, a shell tool call, bridged."""
    expected = dataset_row(CODEX_TASK)["expected_url"]
    [record] = run_demo(stack, "url_extract_codex", CODEX_TASK, tmp_path, n=1)
    assert record.status == "completed", record.episode.verdicts
    assert [s.protocol for s in record.spans] == ["openai.responses"] * 2
    assert record.spans[0].reply_message["tool_calls"][0]["function"]["name"] == "exec_command"
    assert [s.prompt_source for s in record.spans] == ["full_render", "bridged"]
    assert record.spans[-1].reply_message["content"] == f"ANSWER: {expected}"
    assert record.episode.row is not None and not record.episode.verdicts
    answers = list((tmp_path / "outputs").rglob("answer.txt"))
    assert [a.read_text().strip() for a in answers] == [expected]
