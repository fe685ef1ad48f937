"""`veri debug` on records it cannot fully read: every span gets the verdict it deserves, every record
that cannot be walked one line, and the walk goes on (a broken record never hides the others)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.spans import bridged_chain
from veri.core.episodes import RolloutStatus, build_episode
from veri.core.rollout_record import RewardOutcome, RolloutRecord
from veri.core.rules import Rule, Verdict
from veri.tools.harness.debug import explain, read_records, records_in


def veri_debug(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "veri.cli", "debug", *args], capture_output=True, text=True,
                          timeout=120)


def record_dict(rollout_id: str = "r-1") -> dict:
    """A rollout record as the archive writes it (three bridged spans, trained)."""
    spans = bridged_chain()
    record = RolloutRecord(rollout_id=rollout_id, task_index=0, rollout_index=0, status=RolloutStatus.COMPLETED,
                           spans=spans, episode=build_episode(spans), reward=RewardOutcome(reward=1.0))
    return record.model_dump(mode="json")


def with_span_field(record: dict, span: int, field: str, value) -> dict:
    spans = [dict(s) for s in record["spans"]]
    spans[span][field] = value
    return {**record, "spans": spans}


@pytest.mark.needs("process")
def test_a_null_prompt_token_ids_is_token_ids_absent_and_the_walk_goes_on(tmp_path: Path):
    # The bug: a span whose prompt_token_ids is null stopped the walk with pydantic's error.
    broken = with_span_field(record_dict("r-null"), 1, "prompt_token_ids", None)
    path = tmp_path / "rollouts.jsonl"
    path.write_text(json.dumps(broken) + "\n" + json.dumps(record_dict("r-fine")) + "\n")
    result = veri_debug(str(path))
    assert result.returncode == 0, result.stderr
    assert "validation error" not in result.stdout + result.stderr
    assert "token_ids_absent: span 1 cannot be trained on: prompt_token_ids is null" in result.stdout
    assert "result: REJECTED (token_ids_absent)" in result.stdout
    assert "rollout r-fine" in result.stdout and "result: TRAINED on 3 of 3 spans" in result.stdout


@pytest.mark.needs("process")
def test_a_truncated_line_is_one_line_and_the_records_around_it_are_explained(tmp_path: Path):
    good = json.dumps(record_dict("r-before"))
    path = tmp_path / "rollouts.jsonl"
    path.write_text(good + "\n" + good[: len(good) // 2] + "\n\n" + json.dumps(record_dict("r-after")) + "\n")
    result = veri_debug(str(path))
    assert result.returncode == 2  # something could not be read
    assert "rollout r-before" in result.stdout and "rollout r-after" in result.stdout
    [problem] = result.stderr.strip().splitlines()
    assert problem.startswith(f"veri debug: {path} record 2: line 2 is not valid JSON, perhaps cut short")
    assert "Traceback" not in result.stderr


@pytest.mark.needs("process")
def test_records_that_cannot_be_walked_are_named_one_line_each(tmp_path: Path):
    records = [42, {"rollout_id": "r-x"}, {"spans": None}, {**record_dict("r-status"), "status": "exploded"},
               record_dict("r-ok")]
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(item) + "\n" for item in records))
    result = veri_debug(str(path))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines == [
        f"veri debug: {path} record 1: a number, not a rollout record (an object with a `spans` list)",
        f"veri debug: {path} record 2: has no `spans` list (veri debug reads rollout records, or a list of spans)",
        f"veri debug: {path} record 3: its `spans` is null, not a list (veri debug reads rollout records, or a list"
        " of spans)",
        f"veri debug: {path} record 4: unknown status 'exploded' (veri's are completed, failed, truncated)",
    ]
    assert f"== {path} record 5" in result.stdout and "rollout r-ok" in result.stdout


def test_a_json_file_holding_json_lines_is_read_line_by_line(tmp_path: Path):
    path = tmp_path / "rollouts.json"
    path.write_text(json.dumps(record_dict("r-1")) + "\n" + json.dumps(record_dict("r-2")) + "\n")
    assert [entry.record["rollout_id"] for entry in records_in(path)] == ["r-1", "r-2"]
    single = tmp_path / "cut.json"
    single.write_text(json.dumps(record_dict())[:100])
    [entry] = records_in(single)
    assert entry.record is None and entry.problem.startswith("not valid JSON, perhaps cut short")
    with pytest.raises(ValueError, match="record 1: not valid JSON"):
        read_records(single)


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("completion_token_ids", None, "token_ids_absent: span 1 cannot be trained on: completion_token_ids is null"),
        ("prompt_token_ids", [1, "two"], "token_ids_absent: span 1 cannot be trained on: prompt_token_ids[1]: input"
                                         " should be a valid integer"),
        ("token_fidelity", "maybe", "token_ids_absent: span 1 cannot be trained on: token_fidelity: input should be"),
        ("completion_logprobs", None, "logprobs_absent: span 1 cannot be trained on: completion_logprobs is null"),
        ("completion_logprobs", [None, -0.5], "logprobs_absent: span 1 cannot be trained on: completion_logprobs[0]"
                                              " is null"),
        ("logprobs_absent", None, "logprobs_absent: span 1 cannot be trained on: logprobs_absent is null"),
    ],
)
def test_null_or_broken_ids_and_logprobs_get_their_rule(field, value, expected):
    text = explain(with_span_field(record_dict(), 1, field, value))
    assert expected in text
    assert "result: REJECTED" in text


def test_fields_a_rule_does_not_need_are_noted_and_ignored():
    record = with_span_field(record_dict(), 2, "policy_version", "seven")
    record = with_span_field(record, 0, "messages", None)
    text = explain(record)
    assert "note: policy_version: input should be a valid integer" in text
    assert "note: messages is null (ignored)" in text
    assert "result: TRAINED on 3 of 3 spans" in text


def test_missing_null_or_repeated_request_indexes_fall_back_to_list_order():
    record = with_span_field(record_dict(), 0, "request_index", None)
    assert "result: TRAINED on 3 of 3 spans" in explain(record)
    repeated = with_span_field(record_dict(), 2, "request_index", 1)
    text = explain(repeated)
    assert "note: request_index 1 is shared with another span (read as its position, 2)" in text
    assert "result: TRAINED on 3 of 3 spans" in text


def test_a_null_span_in_the_list_is_token_ids_absent():
    record = record_dict()
    record["spans"] = [*record["spans"][:2], None, record["spans"][2]]
    text = explain(record)
    assert "token_ids_absent: span 2 cannot be trained on: the span is null, not an object" in text


def test_an_older_record_without_newer_fields_is_explained():
    record = record_dict()
    newer = {"logprobs_absent", "replica", "cached_prompt_tokens", "tool_call_failures", "client_retry_count",
             "retried_at", "reply_message"}
    record["spans"] = [{k: v for k, v in span.items() if k not in newer} for span in record["spans"]]
    del record["episode"]
    record["reward"] = {"reward": "high", "verdicts": "none"}  # a foreign shape: not a number, not a list
    text = explain(record)
    assert "result: TRAINED on 3 of 3 spans" in text
    assert "reward" not in text.splitlines()[0]


@pytest.mark.needs("process")
def test_ids_the_tokenizer_cannot_decode_are_named(tmp_path: Path, tiny_model: Path):
    record = record_dict()
    spans = record["spans"]
    # span 2 does not extend span 1 at a token no tokenizer has (-5): decoding it must not crash
    spans[2]["prompt_token_ids"] = [*spans[1]["prompt_token_ids"], -5]
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(record))
    result = veri_debug(str(path), "--model", str(tiny_model))
    assert result.returncode == 0, result.stderr
    assert "row 1 (rewritten, spans [2]" in result.stdout and "row 2 (main, spans [0, 1])" in result.stdout
    assert "<ids [-5] not in this tokenizer>" in result.stdout
    assert "tokens: sampled" in result.stdout and "dropped 0" in result.stdout


@pytest.mark.parametrize(("rule", "result"), [
    (Rule.POLICY_SERVER_RESTARTED, "result: REJECTED (policy_server_restarted)"),
    (Rule.COMPLETION_TRUNCATED, "result: MASKED (completion_truncated)"),
])
def test_a_verdict_the_trainer_gave_is_walked_with_the_others(rule: Rule, result: str):
    """The trainer's own rules (a restarted policy server, a truncated rollout masked, a stale version) need
    the job's servers and settings: `veri debug` reads them from the record."""
    record = record_dict()
    verdict = Verdict.of(rule, "span 2 was served by the policy server at http://policy:8000 after it restarted",
                         span=2)
    record["episode"]["verdicts"] = [verdict.model_dump(mode="json")]
    explained = explain(record)
    assert f"{rule}: span 2 was served by the policy server" in explained
    assert result in explained and f"{rule} ({verdict.effect}): {verdict.fix}" in explained
