"""Episodes: spans -> one training row, and every named rule with its verdict."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import AutoTokenizer

from testkit.spans import bridged_chain, make_span
from veri.core.episodes import RolloutStatus, RowKind, build_episode, truncate_episode
from veri.core.records import PromptSource, TokenFidelity
from veri.core.rollout_record import RewardOutcome, RolloutRecord
from veri.core.rules import RULES, Effect, Rule


@pytest.fixture(scope="module")
def tokenizer(tiny_model: Path):
    return AutoTokenizer.from_pretrained(tiny_model)


def test_bridged_chain_becomes_one_exact_row():
    episode = build_episode(bridged_chain())
    assert episode.verdicts == [] and not episode.rejected
    assert episode.chain == [0, 1, 2] and episode.dropped == []
    row = episode.row
    assert row.prompt_ids == [1, 2, 3]
    assert row.completion_ids == [10, 11, 99, 50, 51, 12, 99, 60, 13, 99]
    assert row.env_mask == [1, 1, 1, 0, 0, 1, 1, 0, 1, 1]
    assert row.logprobs == [-0.1, -0.2, -0.3, 0.0, 0.0, -0.4, -0.5, 0.0, -0.6, -0.7]


def test_order_comes_from_request_index_and_plain_dicts_work():
    spans = [span.model_dump() for span in reversed(bridged_chain())]
    assert build_episode(spans).chain == [0, 1, 2]
    minimal = [{"prompt_token_ids": [1], "completion_token_ids": [2], "completion_logprobs": [-1.0]}]
    assert build_episode(minimal).row.completion_ids == [2]  # a foreign record: no request_index, no labels


def sampled_tokens(episode) -> list[int]:
    """Every token the rows train (env_mask 1), over all rows, in order."""
    return [t for row in episode.rows for t, m in zip(row.completion_ids, row.env_mask, strict=True) if m]


def test_a_compaction_trains_the_history_before_it_as_a_row_of_its_own(tokenizer):
    system = tokenizer.encode("You extract links.")
    messages = [{"role": "system", "content": "You extract links."}, {"role": "user", "content": "Page one"}]
    first = make_span(0, system + tokenizer.encode(" Page one"), tokenizer.encode(" fetch"), messages=messages)
    second = make_span(1, first.prompt_token_ids + first.completion_token_ids + tokenizer.encode(" result"),
                       tokenizer.encode(" done"), bridged_from=0, messages=messages)
    # The harness summarised its history: same system prompt, different text after it.
    rewritten = system + tokenizer.encode(" Summary")
    summary = [messages[0], {"role": "user", "content": "Summary"}]
    third = make_span(2, rewritten, tokenizer.encode(" again"), messages=summary)
    fourth = make_span(3, third.prompt_token_ids + third.completion_token_ids + tokenizer.encode(" ok"),
                       tokenizer.encode(" final"), bridged_from=2, messages=summary)
    episode = build_episode([first, second, third, fourth], decoder=tokenizer)

    assert episode.verdicts == [] and not episode.rejected and episode.dropped == []
    assert episode.chain == [2, 3] and episode.chain_kind == RowKind.COMPACTION
    assert episode.row.prompt_ids == rewritten
    (before,) = episode.branches
    assert before.kind == RowKind.MAIN and before.spans == [0, 1]
    assert before.row.prompt_ids == first.prompt_token_ids
    # Every sampled token once: the history before the compaction is trained in its own row.
    every = [t for span in (first, second, third, fourth) for t in span.completion_token_ids]
    assert sorted(sampled_tokens(episode)) == sorted(every)


def test_every_kind_of_branch_is_a_row_and_every_sampled_token_is_trained_once():
    """An OpenAI-SDK harness that makes a side call, runs a sub-agent, compacts and resends a reply
    changed: 9 calls in 5 chains, all 20 sampled tokens each in exactly one row."""
    sys_main = [{"role": "system", "content": "main agent"}, {"role": "user", "content": "task"}]
    main0 = make_span(0, [1, 2, 3], [10, 11, 99], messages=sys_main)
    title = make_span(1, [7, 8], [70, 99], messages=[{"role": "system", "content": "write a title"}])
    agent0 = make_span(2, [5, 6], [20, 21, 99], messages=[{"role": "system", "content": "sub agent"}])
    agent1 = make_span(3, [5, 6, 20, 21, 99, 40], [22, 99], bridged_from=2, reply="the page links to beta.example")
    result = [*sys_main, {"role": "assistant", "content": "calling agent"},
              {"role": "tool", "content": "agent said: the page links to beta.example"}]
    main1 = make_span(4, [1, 2, 3, 10, 11, 99, 41, 42], [12, 99], bridged_from=0, messages=result)
    main2 = make_span(5, [*main1.prompt_token_ids, *main1.completion_token_ids, 43], [13, 99], bridged_from=4,
                      messages=result)
    compacted = make_span(6, [1, 2, 3, 80, 81], [14, 99], messages=[sys_main[0], {"role": "user", "content": "sum"}])
    # a thinking template strips the earlier reply's first token: the prompt repeats span 6's reply changed
    stripped = make_span(7, [1, 2, 3, 80, 81, 99, 44], [15, 99], messages=sys_main)
    final = make_span(8, [*stripped.prompt_token_ids, *stripped.completion_token_ids, 45], [16, 99], bridged_from=7,
                      messages=sys_main)
    spans = [main0, title, agent0, agent1, main1, main2, compacted, stripped, final]
    episode = build_episode(spans)

    assert episode.verdicts == [] and not episode.rejected
    assert episode.chain == [7, 8] and episode.chain_kind == RowKind.REWRITTEN
    kinds = {tuple(b.spans): b.kind for b in episode.branches}
    assert kinds == {(0, 4, 5): RowKind.MAIN, (1,): RowKind.SIDE_CALL, (2, 3): RowKind.SUB_AGENT,
                     (6,): RowKind.COMPACTION}
    assert len(episode.rows) == 5
    every = [t for span in spans for t in span.completion_token_ids]
    assert sorted(sampled_tokens(episode)) == sorted(every) and len(sampled_tokens(episode)) == 20
    agent = next(b for b in episode.branches if b.kind == RowKind.SUB_AGENT)
    assert "span 4's tool result" in agent.why
    rewritten = episode.row
    assert rewritten.prompt_ids == stripped.prompt_token_ids  # span 6's changed reply: context, not trained


def test_a_side_call_is_its_own_row_and_the_main_conversation_kept():
    main = make_span(0, [1, 2], [3, 99])
    side = make_span(1, [7, 8], [9, 99])  # e.g. a title-generation call
    final = make_span(2, [1, 2, 3, 99, 5], [6, 99], bridged_from=1)  # the label lies: tokens extend span 0
    episode = build_episode([main, side, final])
    assert episode.chain == [0, 2] and episode.dropped == [] and episode.verdicts == []
    (call,) = episode.branches
    assert call.kind == RowKind.SIDE_CALL and call.spans == [1] and call.shared_tokens == 0
    assert call.row.completion_ids == [9, 99] and call.row.env_mask == [1, 1]
    assert episode.row.completion_ids == [3, 99, 5, 6, 99] and episode.row.env_mask == [1, 1, 0, 1, 1]


def test_a_long_branch_is_truncated_row_by_row():
    main = make_span(0, [1, 2], [3, 99])
    side = make_span(1, [7, 8], [9, 9, 9, 9, 9, 99])
    final = make_span(2, [1, 2, 3, 99, 6], [5, 99])
    episode = truncate_episode(build_episode([main, side, final]), 5)
    (verdict,) = episode.verdicts
    assert verdict.rule == Rule.RESPONSE_TRUNCATED and verdict.span == 1 and "side_call row" in verdict.message
    assert episode.branches[0].row.completion_ids == [9, 9, 9, 9, 9] and episode.row.completion_ids == [3, 99, 6, 5, 99]


def test_full_render_that_extends_is_in_the_chain():
    first, second, third = bridged_chain()
    relabelled = third.model_copy(update={"prompt_source": PromptSource.FULL_RENDER, "bridged_from": None})
    assert build_episode([first, second, relabelled]).chain == [0, 1, 2]


def test_a_shorter_prompt_starts_a_row_of_its_own():
    first = make_span(0, [1, 2, 3], [4, 99])
    final = make_span(1, [1, 2], [5])
    episode = build_episode([first, final])
    assert episode.chain == [1] and episode.verdicts == []
    (earlier,) = episode.branches
    assert earlier.kind == RowKind.MAIN and earlier.row.completion_ids == [4, 99]
    assert episode.chain_kind == RowKind.SIDE_CALL and episode.row.prompt_ids == [1, 2]  # no system prompt to tell


@pytest.mark.parametrize(
    ("span", "why"),
    [
        (make_span(1, [], [], fidelity=TokenFidelity.ABSENT), "token_fidelity is 'absent'"),
        (make_span(1, [1, 2, 3, 10, 11, 99, 7], [], logprobs=[]), "no completion_token_ids"),
    ],
)
def test_a_span_without_ids_rejects_the_rollout(span, why):
    episode = build_episode([bridged_chain()[0], span])
    (verdict,) = episode.verdicts
    assert verdict.rule == Rule.TOKEN_IDS_ABSENT and verdict.effect == Effect.REJECT and verdict.span == 1
    assert why in verdict.message
    assert episode.rejected and episode.row is None


@pytest.mark.parametrize(
    ("span", "why"),
    [
        (make_span(1, [1, 2, 3, 10, 11, 99, 7], [8, 9], logprobs=[-1.0]), "1 completion_logprobs for 2"),
        (make_span(1, [1, 2, 3, 10, 11, 99, 7], [8, 9], logprobs=[]).model_copy(update={"logprobs_absent": True}),
         "the policy server returned no logprobs"),
    ],
)
def test_a_span_without_logprobs_rejects_the_rollout(span, why):
    episode = build_episode([bridged_chain()[0], span])
    (verdict,) = episode.verdicts
    assert verdict.rule == Rule.LOGPROBS_ABSENT and verdict.effect == Effect.REJECT and verdict.span == 1
    assert why in verdict.message and "--logprobs-mode processed_logprobs" in verdict.fix
    # Its ids still place it: it extends span 0, so the chain is recorded, but no row is trained.
    assert episode.chain == [0, 1] and episode.rejected and episode.row is None


def test_no_spans_rejects():
    episode = build_episode([])
    assert [v.rule for v in episode.verdicts] == [Rule.NO_SPANS] and episode.rejected and episode.row is None


@pytest.mark.parametrize(
    ("status", "rule"), [(RolloutStatus.FAILED, Rule.HARNESS_FAILED), (RolloutStatus.TRUNCATED, Rule.HARNESS_TIMEOUT)]
)
def test_failed_and_truncated_harnesses_are_rejected(status, rule):
    episode = build_episode(bridged_chain(), status, exit_code=3)
    assert [v.rule for v in episode.verdicts] == [rule] and episode.rejected
    assert episode.row is not None  # kept for the record and `veri debug`, never trained
    if rule == Rule.HARNESS_FAILED:
        assert "exit code 3" in episode.verdicts[0].message


def test_policy_versions_over_the_chain():
    spans = bridged_chain()
    spans[2] = spans[2].model_copy(update={"policy_version": 1})
    assert build_episode(spans).policy_versions == [0, 1]


def test_every_rule_has_an_effect_and_a_fix():
    assert set(RULES) == set(Rule)
    assert all(spec.fix and spec.summary for spec in RULES.values())


def test_rollout_record_round_trips_and_knows_if_it_is_trainable():
    spans = bridged_chain()
    record = RolloutRecord(
        rollout_id="r-1", task_index=0, rollout_index=2, task={"prompt": "p"}, status=RolloutStatus.COMPLETED,
        spans=spans, episode=build_episode(spans), reward=RewardOutcome(reward=1.0, per_function={"url": 1.0}),
    )
    assert record.trainable
    assert RolloutRecord.model_validate_json(record.model_dump_json()) == record
    unscored = record.model_copy(update={"reward": None})
    assert not unscored.trainable
    failed = record.model_copy(update={"episode": build_episode(spans, RolloutStatus.FAILED)})
    assert not failed.trainable and [v.rule for v in failed.verdicts] == [Rule.HARNESS_FAILED]


def test_a_row_longer_than_max_response_length_is_cut_and_says_so():
    episode = build_episode(bridged_chain())  # completion: 3 sampled, 2 environment, 2 sampled, 1, 2
    row = episode.row
    assert truncate_episode(episode, len(row.completion_ids)) is episode

    cut = truncate_episode(episode, 5)  # lands in the first environment turn: it is dropped too
    assert cut.row.completion_ids == row.completion_ids[:3] and cut.row.env_mask == [1, 1, 1]
    assert cut.row.logprobs == row.logprobs[:3] and cut.row.prompt_ids == row.prompt_ids
    [verdict] = cut.verdicts
    assert verdict.rule == Rule.RESPONSE_TRUNCATED and verdict.effect == Effect.DEGRADE
    assert verdict.details == {"length": len(row.completion_ids), "kept": 3} and not cut.rejected

    assert truncate_episode(episode, 7).row.env_mask == [1, 1, 1, 0, 0, 1, 1]
