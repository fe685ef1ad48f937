"""The replay policy: which recorded completion answers a call."""

from __future__ import annotations

import pytest

from veri.replay.policy import RecordedCompletions
from veri.replay.recording import RecordingError
from veri.replay.runner import check_model


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
