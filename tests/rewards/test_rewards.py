"""Reward functions: TRL's calling convention for one rollout, injection, timeouts, errors, weights."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from testkit.spans import bridged_chain, make_span
from veri.core.config import RewardConfig
from veri.core.episodes import RolloutStatus, build_episode
from veri.core.problems import ProblemsError
from veri.core.rollout_record import RolloutRecord
from veri.core.rules import Rule
from veri.loop.rewards import RewardFunction, RewardInputs, RewardScorer, load_reward_functions

TASK = {"prompt": [{"role": "user", "content": "Find the URL"}], "expected_url": "https://a.example"}
CONVERSATION = [
    {"role": "user", "content": "Find the URL"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                                                          "function": {"name": "fetch", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "<a href='https://a.example'>"},
]


def inputs(**changes) -> RewardInputs:
    spans = bridged_chain()
    spans[-1] = make_span(2, spans[-1].prompt_token_ids, spans[-1].completion_token_ids, bridged_from=1,
                          messages=CONVERSATION, reply="It is https://a.example")
    record = RolloutRecord(rollout_id="r-1", task_index=0, rollout_index=0, task=TASK,
                           status=RolloutStatus.COMPLETED, spans=spans, episode=build_episode(spans))
    return RewardInputs.from_record(record, **changes)


def score(*functions: RewardFunction, timeout_s: float = 5.0, **changes):
    with RewardScorer(list(functions), timeout_s) as scorer:
        return scorer.score(inputs(**changes))


def test_trl_convention_for_one_rollout():
    seen = {}

    def reward(prompts, completions, completion_ids, expected_url, **kwargs):
        seen.update(prompts=prompts, completions=completions, ids=completion_ids, url=expected_url, kwargs=kwargs)
        return [1.0]

    outcome = score(RewardFunction.wrap("r", reward), trainer_state="STATE")
    assert outcome.reward == 1.0 and outcome.verdicts == []
    assert seen["prompts"] == [TASK["prompt"]]
    assert seen["completions"] == [[{"role": "assistant", "content": "It is https://a.example"}]]
    assert seen["ids"] == [[10, 11, 99, 50, 51, 12, 99, 60, 13, 99]]  # the row's completion
    assert seen["url"] == ["https://a.example"]
    assert seen["kwargs"] == {"trainer_state": "STATE"}  # trajectory/outputs only when declared


def test_text_prompt_gets_text_completion():
    got = []
    record_inputs = inputs()
    record_inputs.task = {"prompt": "Find the URL"}
    record_inputs.completion = "It is https://a.example"
    with RewardScorer([RewardFunction.wrap("r", lambda completions, **kw: got.append(completions) or 0.5)], 5) as s:
        assert s.score(record_inputs).reward == 0.5  # a bare number is accepted too
    assert got == [["It is https://a.example"]]


def test_trajectory_and_outputs_go_to_functions_that_declare_them(tmp_path: Path):
    (tmp_path / "answer.txt").write_text("https://a.example")

    def reward(completions, trajectory, outputs):
        tool_results = [m["content"] for m in trajectory[0] if m["role"] == "tool"]
        return [float("a.example" in tool_results[0]) + float((outputs[0] / "answer.txt").exists())]

    outcome = score(RewardFunction.wrap("r", reward), outputs=tmp_path)
    assert outcome.reward == 2.0


def test_async_functions_and_weights():
    async def judge(completions, **kwargs):
        return [0.5]

    outcome = score(RewardFunction.wrap("judge", judge, 2.0), RewardFunction.wrap("one", lambda **kw: [1.0], 0.5))
    assert outcome.per_function == {"judge": 0.5, "one": 1.0} and outcome.reward == 1.5


def test_none_is_no_value_and_all_none_is_an_error():
    outcome = score(RewardFunction.wrap("a", lambda **kw: [None]), RewardFunction.wrap("b", lambda **kw: [3.0]))
    assert outcome.reward == 3.0
    outcome = score(RewardFunction.wrap("a", lambda **kw: [None]))
    assert outcome.reward is None and outcome.verdicts[0].rule == Rule.REWARD_ERROR


def test_exception_and_timeout_are_reward_errors_while_others_still_score():
    def broken(**kwargs):
        raise KeyError("expected_url")

    def hung(**kwargs):
        time.sleep(30)

    async def hung_async(**kwargs):
        import asyncio

        await asyncio.sleep(30)

    outcome = score(
        RewardFunction.wrap("broken", broken), RewardFunction.wrap("hung", hung),
        RewardFunction.wrap("hung_async", hung_async), RewardFunction.wrap("ok", lambda **kw: [1.0]),
        RewardFunction.wrap("bad", lambda **kw: ["yes"]), timeout_s=0.5,
    )
    assert outcome.reward is None  # masked
    assert outcome.per_function == {"broken": None, "hung": None, "hung_async": None, "ok": 1.0, "bad": None}
    verdicts = {v.details["function"]: v for v in outcome.verdicts}
    assert {v.rule for v in verdicts.values()} == {Rule.REWARD_ERROR}
    assert "raised KeyError: 'expected_url'" in verdicts["broken"].message
    assert "KeyError" in verdicts["broken"].details["traceback"]
    assert "did not return within reward_timeout_s=0.5s" in verdicts["hung"].message
    assert verdicts["hung_async"].details["kind"] == "timeout"
    assert "returned 'yes'" in verdicts["bad"].message


def test_score_many_runs_rollouts_concurrently():
    # Every call waits at a barrier for a second one: scored one at a time, the barrier would break
    # (reward None) instead of releasing the pair.
    pair = threading.Barrier(2, timeout=5)

    def together(**kwargs):
        pair.wait()
        return [1.0]

    with RewardScorer([RewardFunction.wrap("together", together)], 10) as scorer:
        outcomes = scorer.score_many([inputs() for _ in range(8)])
    assert [o.reward for o in outcomes] == [1.0] * 8, [o.verdicts for o in outcomes]


def test_load_from_file_and_inline_source(tmp_path: Path):
    (tmp_path / "several.py").write_text("def helper(**kw):\n    return [0.0]\n\ndef reward(**kw):\n    return [1.0]\n")
    (tmp_path / "one.py").write_text("def url_match(completions, **kw):\n    return [2.0]\n")
    specs = [
        RewardConfig(file=tmp_path / "several.py"),
        RewardConfig(file=tmp_path / "one.py", weight=0.5),
        RewardConfig(source="async def judge(**kw):\n    return [3.0]\n", name="llm"),
        RewardConfig(file=tmp_path / "several.py", function="helper", name="helper"),
    ]
    functions = load_reward_functions(specs)
    assert [(f.name, f.weight, f.is_async) for f in functions] == [
        ("reward", 1.0, False), ("url_match", 0.5, False), ("llm", 1.0, True), ("helper", 1.0, False)]
    with RewardScorer(functions, 5) as scorer:
        assert scorer.score(inputs()).reward == 1.0 + 1.0 + 3.0 + 0.0


def test_load_problems_are_all_reported(tmp_path: Path):
    (tmp_path / "two.py").write_text("def a(**kw):\n    return [0]\n\ndef b(**kw):\n    return [0]\n")
    specs = [
        RewardConfig(file=tmp_path / "two.py"),
        RewardConfig(source="def reward(:\n"),
        RewardConfig(source="def reward(completions, answer):\n    return [0]\n"),
        RewardConfig(source="def reward(**kw):\n    return [0]\n", function="missing"),
    ]
    with pytest.raises(ProblemsError) as raised:
        load_reward_functions(specs, columns=["prompt", "expected_url", "outputs"])
    text = str(raised.value)
    assert "defines functions ['a', 'b'] and none is named `reward`" in text and "function: <name>" in text
    assert "cannot load source: SyntaxError" in text
    assert "requires 'answer', which is neither a standard input nor a dataset column" in text
    assert "no function 'missing'" in text
    assert "the dataset column 'outputs' has the name of a reward input" in text


def test_inline_tracebacks_show_the_source():
    (function,) = load_reward_functions([RewardConfig(source="def reward(**kw):\n    return [1 / 0]\n")])
    outcome = score(function)
    assert "return [1 / 0]" in outcome.verdicts[0].details["traceback"]
