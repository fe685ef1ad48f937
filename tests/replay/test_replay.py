"""Replaying the checked-in recordings: a change to rendering, bridging, spans or masking that would
alter a training row fails here (re-record with `python -m testkit.record_demos` when intended)."""

from __future__ import annotations

import pytest

from tests.replay.conftest import EXPECTED, RECORDINGS
from veri.core import episodes
from veri.tools.replay.diff import differences
from veri.tools.replay.recording import Recording, RecordingError
from veri.tools.replay.runner import check_model, replay_in_process


def test_every_demo_has_a_recording():
    assert sorted(path.stem for path in RECORDINGS.glob("*.jsonl")) == EXPECTED


@pytest.mark.parametrize("name", EXPECTED)
def test_recording_replays_identically(name, tiny_model):
    recording = Recording.load(RECORDINGS / f"{name}.jsonl")
    assert recording.spans and recording.episode.row is not None and not recording.episode.verdicts
    assert all(request.status == 200 for request in recording.requests)
    if recording.task is not None:  # the URL demos: the reward is replayed too
        assert recording.reward is not None and recording.reward.reward == 1.0

    replay = replay_in_process(recording, tiny_model)

    found = differences(recording, replay)
    assert found == [], "\n".join(found)
    assert [span.prompt_source for span in replay.spans] == [span.prompt_source for span in recording.spans]
    if len(recording.spans) > 1 and any(span.reply_message.get("tool_calls") for span in recording.spans):
        assert replay.id_map, "the replay's tool call ids were not carried into the later requests"


def test_a_changed_mask_is_caught(anthropic_recording, tiny_model, monkeypatch):
    built_row = episodes.chain_row

    def row_training_on_tool_results(chain):
        row = built_row(chain)
        return row.model_copy(update={"env_mask": [1] * len(row.env_mask)})

    monkeypatch.setattr(episodes, "chain_row", row_training_on_tool_results)
    found = differences(anthropic_recording, replay_in_process(anthropic_recording, tiny_model))
    assert len(found) == 1 and found[0].startswith("episode.row.env_mask: first difference at position"), found


def test_a_changed_template_setting_is_caught(anthropic_recording, tiny_model):
    anthropic_recording.capture.chat_template_kwargs = {"enable_thinking": False}
    replay = replay_in_process(anthropic_recording, tiny_model)
    found = differences(anthropic_recording, replay)
    assert any(line.startswith("span 0.prompt_token_ids: first difference at position") for line in found), found
    assert any(line.startswith("episode.row.") for line in found), found


def test_another_model_is_refused_by_name(anthropic_recording, tmp_path):
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(RecordingError, match="re-record it if the change is intended"):
        check_model(anthropic_recording, tmp_path)


def test_a_broken_file_names_the_fix(tmp_path):
    path = tmp_path / "old.jsonl"
    path.write_text('{"format": "veri-replay/0"}')
    with pytest.raises(RecordingError, match="re-record it with `veri replay record`"):
        Recording.load(path)


def test_a_changed_reward_is_caught(tiny_model):
    recording = Recording.load(RECORDINGS / "url_extract_openai.jsonl")
    recording.rewards[0].source = recording.rewards[0].source.replace("return [1.0 if", "return [0.5 if")
    assert "return [0.5 if" in recording.rewards[0].source
    found = differences(recording, replay_in_process(recording, tiny_model))
    assert found == ["reward.reward: recorded 1.0, replayed 0.5",
                     "reward.per_function.reward: recorded 1.0, replayed 0.5"], found
