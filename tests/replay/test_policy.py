"""The replay policy: which recorded completion answers a call; the order a replay sends the calls."""

from __future__ import annotations

import pytest

from veri.core.records import RecordedRequest
from veri.tools.replay.policy import RecordedCompletions
from veri.tools.replay.recording import RecordingError
from veri.tools.replay.runner import check_model, replay_order


@pytest.fixture
def completions(anthropic_recording) -> RecordedCompletions:
    return RecordedCompletions(anthropic_recording.spans)


def test_the_same_prompt_gets_its_own_completion_in_any_order(completions):
    first, second, third = completions.spans
    assert completions.next_for(third.prompt_token_ids) is third
    assert completions.next_for(first.prompt_token_ids) is first
    assert completions.next_for(second.prompt_token_ids) is second


def test_a_changed_prompt_gets_the_next_in_order_and_a_full_round_starts_over(completions):
    first, second, third = completions.spans
    assert completions.next_for([1, 2, 3]) is first  # rendered differently: the diff will show it
    assert completions.next_for(third.prompt_token_ids) is third
    assert completions.next_for([4]) is second
    assert completions.next_for(first.prompt_token_ids) is first  # every one served: a second replay


def test_a_missing_model_folder_is_named(anthropic_recording, tmp_path):
    with pytest.raises(RecordingError, match="no model folder at .*make tiny-model"):
        check_model(anthropic_recording, tmp_path / "absent")


def test_calls_made_at_once_replay_in_the_order_they_were_answered():
    def request(seq: int, received_at: float, answered_at: float | None) -> RecordedRequest:
        return RecordedRequest(seq=seq, method="POST", path="/v1/messages", headers={}, auth=None, body="{}",
                               status=200, received_at=received_at, answered_at=answered_at)

    # 1 and 2 were in flight together and 2 was answered (its span committed) first; 3 came after both.
    calls = [request(0, 0.0, 1.0), request(1, 2.0, 5.0), request(2, 2.1, 4.0), request(3, 6.0, 7.0)]
    assert [call.seq for call in replay_order(calls)] == [0, 2, 1, 3]
    # A recording without answer times replays in arrival order.
    assert [call.seq for call in replay_order([request(1, 2.0, None), request(0, 1.0, None)])] == [0, 1]
