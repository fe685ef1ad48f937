"""`veri validate` and `veri debug` as a user runs them (subprocesses)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.spans import bridged_chain, make_span
from tests.core.jobs import job, make_job_dir, write_job
from veri.core.episodes import RolloutStatus, build_episode
from veri.core.rollout_record import RewardOutcome, RolloutRecord

pytestmark = pytest.mark.needs("process")


def veri(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "veri.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def test_validate_prints_every_problem_and_fails(tmp_path: Path):
    folder = make_job_dir(tmp_path)
    config = job(max_step=5, grpo={"per_device_train_bach_size": 4}, rewards=[{"source": "def reward(:\n"}])
    result = veri("validate", str(write_job(folder, config)), "--base-dir", str(folder))
    assert result.returncode == 1, result.stderr
    assert "problem: max_step: is not a known key\n    fix: did you mean `max_steps`?" in result.stdout
    assert "did you mean `per_device_train_batch_size`?" in result.stdout
    assert "rewards[0]: cannot load source: SyntaxError" in result.stdout
    assert result.stdout.strip().endswith("3 problems")


def test_validate_ok_with_the_layout_for_a_gpu_box(tmp_path: Path):
    folder = make_job_dir(tmp_path)
    path = write_job(folder, job(backend="vllm", grpo={}), name="job.yaml")
    result = veri("validate", "job.yaml", "--gpus", "8", cwd=folder)  # relative paths start in cwd
    assert result.returncode == 0, result.stdout + result.stderr
    assert "GPU layout: 8 GPUs: trainer on GPU 0; policy (vLLM) TP=4 x DP=1 on GPUs 1,2,3,4" in result.stdout
    assert f"{path.name}: OK" in result.stdout


def test_debug_explains_a_rewritten_history(tmp_path: Path, tiny_model: Path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    first = make_span(0, tokenizer.encode("Extract the links please"), tokenizer.encode(" ok"))
    rewritten = tokenizer.encode("Extract the summary")
    second = make_span(1, rewritten, tokenizer.encode(" done"))
    spans = [first, second]
    record = RolloutRecord(rollout_id="r-9", task_index=3, rollout_index=1, status=RolloutStatus.COMPLETED,
                           spans=spans, episode=build_episode(spans), reward=RewardOutcome(reward=1.0))
    path = tmp_path / "trajectory.jsonl"
    path.write_text(record.model_dump_json() + "\n")

    result = veri("debug", str(path), "--model", str(tiny_model))
    assert result.returncode == 0, result.stderr
    position = next(i for i, (a, b) in enumerate(zip(first.prompt_token_ids, rewritten, strict=False)) if a != b)
    expected = repr(tokenizer.decode([first.prompt_token_ids[position]]))
    actual = repr(tokenizer.decode([rewritten[position]]))
    assert "rollout r-9  task 3 #1  status completed  reward 1" in result.stdout
    assert "row 1 (side_call, spans [1], ends at the final answer)" in result.stdout  # no system prompt to compare
    assert "row 2 (main, spans [0])" in result.stdout
    assert f"at position {position}" in result.stdout and expected in result.stdout and actual in result.stdout
    assert "span 1  full_render  prompt" in result.stdout and "in row (1/1)" in result.stdout
    assert "result: TRAINED on 2 of 2 spans in 2 row(s)" in result.stdout
    assert "tokens: sampled 4, trained 4, dropped 0" in result.stdout


def test_debug_reads_foreign_records_and_bare_span_lists(tmp_path: Path):
    spans = [span.model_dump(mode="json") for span in bridged_chain()]
    foreign = [{"id": "x", "status": "failed", "spans": [{k: s[k] for k in
               ("prompt_token_ids", "completion_token_ids", "completion_logprobs")} for s in spans]},
               {"spans": [{**spans[0], "token_fidelity": "absent"}]},
               {"spans": [], "reward": {"verdicts": [{"rule": "reward_error", "effect": "reject", "message": "boom",
                                                      "fix": "fix it"}]}}]
    (tmp_path / "foreign.json").write_text(json.dumps(foreign))
    (tmp_path / "spans.json").write_text(json.dumps(spans))
    result = veri("debug", str(tmp_path / "foreign.json"), str(tmp_path / "spans.json"))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "harness_failed: the harness exited non-zero" in out and "harness_failed (reject): read the" in out
    assert "token_ids_absent: span 0 cannot be trained on: token_fidelity is 'absent'" in out
    assert "no_spans: the harness made no model call" in out and "reward_error: boom" in out
    assert out.count("result: REJECTED") == 3
    assert "result: TRAINED on 3 of 3 spans: prompt 3 tokens, completion 10 (7 sampled, 3 environment)" in out


def test_debug_says_when_a_file_is_not_a_record(tmp_path: Path):
    (tmp_path / "bad.json").write_text('{"hello": 1}')
    result = veri("debug", str(tmp_path / "bad.json"))
    assert result.returncode == 2 and "has no `spans` list" in result.stderr
