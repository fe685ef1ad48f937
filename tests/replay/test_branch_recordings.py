"""The recorded rollouts with more than one conversation: Claude Code starting a sub-agent
(recordings/claude_sub_agent.jsonl) and a harness compacting its history (anthropic_compaction.jsonl).
Two rows each, every sampled token trained exactly once; a change that drops or duplicates a token of
the second row fails the replay."""

from __future__ import annotations

import pytest

from tests.replay.conftest import RECORDINGS
from veri.core import branches
from veri.core.branches import RowKind, TrainingRow
from veri.core.token_account import sampled_tokens, token_account
from veri.tools.replay.diff import differences
from veri.tools.replay.recording import Recording
from veri.tools.replay.runner import replay_in_process


@pytest.fixture
def sub_agent_recording() -> Recording:
    return Recording.load(RECORDINGS / "claude_sub_agent.jsonl")


def trained_tokens(row: TrainingRow) -> list[int]:
    return [token for token, mask in zip(row.completion_ids, row.env_mask, strict=True) if mask]


def test_the_sub_agent_is_a_row_of_its_own(sub_agent_recording):
    recording = sub_agent_recording
    spans = {span.request_index: span for span in recording.spans}
    [agent_call] = [block for block in spans[0].response["content"] if block["type"] == "tool_use"]
    assert agent_call["name"] == "Agent" and agent_call["input"]["run_in_background"] is False
    # The sub-agent's own system prompt (Claude Code marks it `cc_is_subagent=true`): a new conversation.
    assert "cc_is_subagent=true" in spans[1].messages[0]["content"] and spans[1].messages[0]["role"] == "system"
    assert "cc_is_subagent" not in spans[0].messages[0]["content"]
    [bash] = [block for block in spans[1].response["content"] if block["type"] == "tool_use"]
    assert bash["name"] == "Bash"

    episode = recording.episode
    [sub_agent] = episode.branches
    assert episode.chain_kind == RowKind.MAIN and episode.chain == [0, 3]
    assert sub_agent.kind == RowKind.SUB_AGENT and sub_agent.spans == [1, 2]
    assert sub_agent.why == "its reply comes back in span 3's tool result"
    # Token for token: each row trains exactly its spans' completions, and every span is in one row.
    for indices, row in [(episode.chain, episode.row), (sub_agent.spans, sub_agent.row)]:
        assert trained_tokens(row) == [token for i in indices for token in spans[i].completion_token_ids]
    assert sorted(episode.chain + sub_agent.spans) == sorted(spans)

    sampled = {i: sampled_tokens(span.completion_token_ids, span.response) for i, span in spans.items()}
    account = token_account(episode, sampled, episode.verdicts, trainable=True)
    assert account.sampled == account.trained == sum(sampled.values()) > 0 and account.dropped == {}


def account_of(recording: Recording):
    episode = recording.episode
    sampled = {s.request_index: sampled_tokens(s.completion_token_ids, s.response) for s in recording.spans}
    return token_account(episode, sampled, episode.verdicts, trainable=True), sum(sampled.values())


def test_the_compacted_history_is_a_row_of_its_own():
    recording = Recording.load(RECORDINGS / "anthropic_compaction.jsonl")
    spans = {span.request_index: span for span in recording.spans}
    episode = recording.episode
    [before] = episode.branches
    assert before.kind == RowKind.MAIN and before.spans == [0, 1, 2]  # the summary call extends the history
    assert episode.chain_kind == RowKind.COMPACTION and episode.chain == [3], episode.chain_why
    for indices, row in [(episode.chain, episode.row), (before.spans, before.row)]:
        assert trained_tokens(row) == [token for i in indices for token in spans[i].completion_token_ids]
    account, total = account_of(recording)
    assert account.sampled == account.trained == total > 0 and account.dropped == {}


@pytest.mark.parametrize("change", [
    lambda ids: ids[:-1],        # the sub-agent's last sampled token dropped
    lambda ids: ids + ids[-1:],  # ... or trained twice
], ids=["dropped", "duplicated"])
def test_a_dropped_or_duplicated_sub_agent_token_is_caught(sub_agent_recording, tiny_model, monkeypatch, change):
    built_row = branches.chain_row

    def changed(chain):
        row = built_row(chain)
        if chain[0].request_index != 1:  # only the sub-agent's row
            return row
        return TrainingRow(prompt_ids=row.prompt_ids, completion_ids=change(row.completion_ids),
                           logprobs=change(row.logprobs), env_mask=change(row.env_mask))

    monkeypatch.setattr(branches, "chain_row", changed)
    found = differences(sub_agent_recording, replay_in_process(sub_agent_recording, tiny_model))
    assert found and all(line.startswith("episode.branches") for line in found), found
    assert found[0].startswith("episode.branches[0].row.completion_ids: first difference at position"), found
