"""The demo's harness bundles, end to end without docker: each entrypoint runs as a plain subprocess
with the exact rollout environment, against a real webfixture, capture proxy and (scripted) policy."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from testkit.demo import BUNDLES, SUB_AGENT_BRIEF, image_bin, proxy_with_max_tokens, run_bundle
from tests.proxy.conftest import assert_bridged_chain
from veri.core.config import RewardConfig
from veri.core.episodes import RowKind
from veri.core.harness import load_manifest
from veri.core.rules import Effect
from veri.loop.rewards import load_reward_functions
from veri.loop.rewards.functions import RewardInputs
from veri.loop.rewards.scoring import RewardScorer
from veri.services.webfixture.inline_tasks import inline_task
from veri.tools.harness.run import RunOptions
from veri.tools.harness.run import run as run_harness

URL_REWARDS = BUNDLES.parent / "config/rewards/url_extract.py"


def load_agent(bundle: str):
    spec = importlib.util.spec_from_file_location(f"agent_{bundle}", BUNDLES / bundle / "agent.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_manifests():
    openai_bundle = load_manifest(BUNDLES / "url_extract_openai")
    assert (openai_bundle.name, openai_bundle.base_image, openai_bundle.protocol) == (
        "url_extract_openai", "veri/base", "openai")
    assert openai_bundle.entrypoint == ["python", "agent.py"]
    inline_bundle = load_manifest(BUNDLES / "url_extract_inline")
    assert (inline_bundle.name, inline_bundle.base_image, inline_bundle.protocol) == (
        "url_extract_inline", "veri/base", "openai")
    claude_bundle = load_manifest(BUNDLES / "url_extract_claude")
    assert (claude_bundle.name, claude_bundle.base_image, claude_bundle.protocol) == (
        "url_extract_claude", "veri/base-claude-agent", "anthropic")


@pytest.mark.parametrize("bundle", ["url_extract_openai", "url_extract_claude"])
@pytest.mark.parametrize(("text", "answer"), [
    ("ANSWER: https://a.test/x", "https://a.test/x"),
    ("The link is below.\nANSWER: <https://a.test/x?plan=team>.", "https://a.test/x?plan=team"),
    ("ANSWER: `https://a.test/1` then\nANSWER: \"https://a.test/2\"", "https://a.test/2"),
    ("I could not find it.", None),
    (None, None),
])
def test_parse_answer(bundle, text, answer):
    assert load_agent(bundle).parse_answer(text) == answer


@pytest.mark.needs("process")
def test_openai_bundle_extracts_the_url(demo_proxy, session, control, openai_task, tmp_path):
    run = run_bundle("url_extract_openai", proxy=demo_proxy, session=session, row=openai_task, tmp_path=tmp_path)
    assert run.returncode == 0, run.explain()
    assert run.answer() == openai_task["expected_url"]
    assert f"ANSWER: {openai_task['expected_url']}" in run.stdout

    first, second = control.spans(session.rollout_id)
    [call] = first.response["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "fetch_url"
    assert json.loads(call["function"]["arguments"]) == {"url": openai_task["url"]}
    assert first.response["choices"][0]["finish_reason"] == "tool_calls"
    assert first.tools and first.tools[0]["function"]["name"] == "fetch_url"
    tool_result = [m for m in second.messages if m["role"] == "tool"][0]["content"]
    assert tool_result.startswith("HTTP 200") and f'href="{openai_task["expected_url"]}"' in tool_result
    assert second.response["choices"][0]["message"]["content"] == f"ANSWER: {openai_task['expected_url']}"
    assert_bridged_chain([first, second])
    assert all(s.token_fidelity == "captured" for s in (first, second))


@pytest.mark.needs("process")
def test_inline_bundle_answers_in_one_call(demo_proxy, session, control, openai_task, tmp_path):
    row = inline_task(openai_task["page"], base=openai_task["url"].split("/pages/")[0])
    run = run_bundle("url_extract_inline", proxy=demo_proxy, session=session, row=row, tmp_path=tmp_path)
    assert run.returncode == 0, run.explain()
    assert run.answer() == row["expected_url"] == openai_task["expected_url"]
    [span] = control.spans(session.rollout_id)
    assert not span.tools and span.messages[-1]["content"] == row["prompt"]
    assert span.token_fidelity == "captured"


@pytest.mark.parametrize(("reply", "url"), [
    ("https://a.test/x", "https://a.test/x"),
    ("The URL is `https://a.test/x?plan=team`. Also https://b.test", "https://a.test/x?plan=team"),
    ("I do not know.", None),
])
def test_inline_agent_takes_the_first_url(reply, url):
    assert load_agent("url_extract_inline").first_url(reply) == url


@pytest.mark.needs("process")
def test_openai_bundle_out_of_turns_is_a_finished_rollout(demo_proxy, session, control, openai_task, tmp_path):
    run = run_bundle("url_extract_openai", proxy=demo_proxy, session=session, row=openai_task, tmp_path=tmp_path,
                     max_turns=1)
    assert run.returncode == 0, run.explain()
    assert run.answer() == "" and "no final reply within 1 model calls" in run.stderr
    assert len(control.spans(session.rollout_id)) == 1


@pytest.mark.needs("process")
def test_openai_bundle_fails_on_model_api_errors(demo_proxy, session, openai_task, tmp_path):
    run = run_bundle("url_extract_openai", proxy=demo_proxy, session=session, row=openai_task, tmp_path=tmp_path,
                     api_key="veri-wrong-key")
    assert run.returncode == 1, run.explain()
    assert "model API error" in run.stderr and "401" in run.stderr
    assert not (run.output_dir / "answer.txt").exists()


@pytest.mark.needs("docker")
@pytest.mark.slow
def test_claude_bundle_extracts_the_url(demo_proxy, session, control, claude_task, tmp_path):
    run = run_bundle("url_extract_claude", proxy=demo_proxy, session=session, row=claude_task, tmp_path=tmp_path)
    assert run.returncode == 0, run.explain()
    assert run.answer() == claude_task["expected_url"]
    assert json.loads((run.output_dir / "claude-result.json").read_text())["is_error"] is False

    spans = [s for s in control.spans(session.rollout_id) if s.path == "/v1/messages"]
    first_call = next(i for i, s in enumerate(spans) if s.response["stop_reason"] == "tool_use")
    [tool_use] = [b for b in spans[first_call].response["content"] if b["type"] == "tool_use"]
    assert tool_use["name"] == "Bash" and tool_use["input"]["command"] == f"curl -s {claude_task['url']}"
    after = spans[first_call + 1]
    tool_results = [m["content"] for m in after.messages if m["role"] == "tool"]
    assert any(f'href="{claude_task["expected_url"]}"' in str(content) for content in tool_results)
    assert after.response["stop_reason"] == "end_turn"
    assert_bridged_chain(spans[first_call:first_call + 2])
    assert all(s.token_fidelity == "captured" for s in spans)


@pytest.mark.needs("docker")
@pytest.mark.slow
def test_claude_bundle_fails_on_model_api_errors(demo_proxy, session, claude_task, tmp_path):
    # An unknown rollout (404): Claude Code gives up at once (it retries a 401 for minutes).
    run = run_bundle("url_extract_claude", proxy=demo_proxy, session=session, row=claude_task, tmp_path=tmp_path,
                     rollout_id="r-unknown", timeout_s=120)
    assert run.returncode == 1, run.explain()
    assert "Claude Code failed (api_error)" in run.stderr, run.explain()
    assert not (run.output_dir / "answer.txt").exists()


@pytest.mark.parametrize(("result", "ending"), [
    ({"subtype": "success", "is_error": False, "result": "ANSWER: x"}, "finished"),
    ({"subtype": "error_max_turns", "is_error": True}, "out_of_turns"),
    ({"subtype": "success", "is_error": True, "terminal_reason": "api_error", "api_error": "max_output_tokens",
      "result": "API Error: Claude's response exceeded the 128000 output token maximum."}, "cut_short"),
    ({"subtype": "success", "is_error": True, "terminal_reason": "api_error", "api_error": None,
      "api_error_status": 404, "result": "API Error: 404 unknown rollout"}, "failed"),
])
def test_claude_bundle_tells_an_ending_from_a_failure(result, ending):
    assert load_agent("url_extract_claude").ending(result) == ending


@pytest.mark.needs("docker")
@pytest.mark.slow
def test_claude_reply_cut_at_max_tokens_is_judged_not_masked(demo_policy, tiny_model, claude_task, tmp_path,
                                                             monkeypatch):
    """The policy's reply stops at the job's max_tokens; Claude Code asks it to go on (cut again) and then
    ends on `api_error: max_output_tokens`. Through run-harness's collect path (the trainer's): a finished
    rollout without an answer, trainable, its spans cut at max_tokens, scored by the reward."""
    monkeypatch.setenv("PATH", os.pathsep.join([*image_bin("veri/base-claude-agent", tmp_path), os.environ["PATH"]]))
    with proxy_with_max_tokens(demo_policy, tiny_model, tmp_path / "spans", 4) as short:
        [rollout] = run_harness(RunOptions(
            bundle=BUNDLES / "url_extract_claude", task=claude_task, task_index=claude_task["page"], n=1,
            out=tmp_path / "out", sandbox="local", proxy_url=short.url, control_token=None, model_name="policy",
            max_turns=4, timeout_s=240, start_stack=False))
    record = rollout.record
    assert (record.status, record.exit_code) == ("completed", 0), rollout.launch.stderr_tail
    assert "Claude Code stopped on a reply cut at max_tokens" in rollout.launch.stderr_tail
    assert (rollout.output_dir / "answer.txt").read_text() == ""
    assert json.loads((rollout.output_dir / "claude-result.json").read_text())["api_error"] == "max_output_tokens"
    assert not [v.rule for v in record.episode.verdicts if v.effect == Effect.REJECT]
    assert not record.episode.rejected and record.episode.row is not None
    calls = [span for span in record.spans if span.path == "/v1/messages"]
    assert calls[-1].finish_reason == "length" and calls[-1].response["stop_reason"] == "max_tokens"
    assert len(calls[-1].completion_token_ids) == 4

    [reward] = load_reward_functions([RewardConfig(file=URL_REWARDS, function="reward")], list(claude_task))
    with RewardScorer([reward], timeout_s=30) as scorer:
        outcome = scorer.score(RewardInputs.from_record(record, outputs=rollout.output_dir))
    assert outcome.reward == 0.0 and not outcome.verdicts
    assert record.model_copy(update={"reward": outcome}).trainable


@pytest.mark.needs("docker")
@pytest.mark.slow
def test_claude_bundle_out_of_turns_is_a_finished_rollout(demo_proxy, session, claude_task, tmp_path):
    run = run_bundle("url_extract_claude", proxy=demo_proxy, session=session, row=claude_task, tmp_path=tmp_path,
                     max_turns=1)
    assert run.returncode == 0, run.explain()
    assert run.answer() == "" and "used up its 1 turns" in run.stderr
    assert json.loads((run.output_dir / "claude-result.json").read_text())["subtype"] == "error_max_turns"


@pytest.mark.needs("docker")
@pytest.mark.slow
def test_claude_sub_agent_is_trained_as_a_row_of_its_own(demo_proxy, sub_agent_task, tmp_path, monkeypatch):
    """Claude Code hands the task to a sub-agent with its Agent tool (a new conversation, its own system
    prompt, its answer back in the tool result). Through run-harness's collect path (the trainer's): a
    `main` and a `sub_agent` row, and every sampled token trained exactly once."""
    monkeypatch.setenv("PATH", os.pathsep.join([*image_bin("veri/base-claude-agent", tmp_path), os.environ["PATH"]]))
    [rollout] = run_harness(RunOptions(
        bundle=BUNDLES / "url_extract_claude", task=sub_agent_task, task_index=sub_agent_task["page"], n=1,
        out=tmp_path / "out", sandbox="local", proxy_url=demo_proxy.url, control_token=None, model_name="policy",
        max_turns=4, timeout_s=240, start_stack=False))
    record = rollout.record
    assert (record.status, record.exit_code) == ("completed", 0), rollout.launch.stderr_tail
    assert (rollout.output_dir / "answer.txt").read_text().strip() == sub_agent_task["expected_url"]
    calls = [span for span in record.spans if span.path == "/v1/messages"]
    [agent] = [block for block in calls[0].response["content"] if block["type"] == "tool_use"]
    assert agent["name"] == "Agent" and agent["input"]["prompt"].startswith(SUB_AGENT_BRIEF)

    episode = record.episode
    kinds = sorted(branch.kind for branch in episode.branches)
    assert episode.chain_kind == RowKind.MAIN and RowKind.SUB_AGENT in kinds
    assert set(kinds) <= {RowKind.SUB_AGENT, RowKind.SIDE_CALL}  # Claude Code's side calls, if it makes any
    in_rows = [*episode.chain, *(index for branch in episode.branches for index in branch.spans)]
    assert sorted(in_rows) == sorted(span.request_index for span in record.spans)  # each span in one row

    [reward] = load_reward_functions([RewardConfig(file=URL_REWARDS, function="reward")], list(sub_agent_task))
    with RewardScorer([reward], timeout_s=30) as scorer:
        outcome = scorer.score(RewardInputs.from_record(record, outputs=rollout.output_dir))
    assert outcome.reward == 1.0
    account = record.model_copy(update={"reward": outcome}).tokens
    assert account.sampled == account.trained > 0 and account.dropped == {}, account.line()
