"""A recording with a client's retry in it replays identically: the re-sent request is answered from
the first try's span again (a retry is not a branch: docs/branches.md), and the diff compares how
many retries a span had, not when they came."""

from __future__ import annotations

from veri.cli import main
from veri.services.proxy.history import RETRY_COUNT_HEADER
from veri.tools.replay.recording import Recording


def with_a_retry_of_the_second_call(recording: Recording) -> Recording:
    """The Anthropic SDK recording as if its second messages call (span 1) had timed out once and been
    re-sent by the SDK: the same body again, retry count 1, answered from span 1."""
    changed = recording.model_copy(deep=True)
    second = next(r for r in changed.requests if r.path == "/v1/messages" and r.seq > changed.requests[1].seq)
    retry = second.model_copy(update={"headers": {**second.headers, RETRY_COUNT_HEADER: "1"}})
    at = changed.requests.index(second) + 1
    changed.requests = [*changed.requests[:at], retry, *changed.requests[at:]]
    for seq, request in enumerate(changed.requests):
        request.seq = seq
    changed.spans[1].retried_at = [changed.spans[1].started_at + 30.0]
    return changed


def test_a_recorded_retry_replays_identically(anthropic_recording, tiny_model, tmp_path, capsys):
    path = tmp_path / "retried.jsonl"
    with_a_retry_of_the_second_call(anthropic_recording).save(path)
    capsys.readouterr()
    assert main(["replay", "run", str(path), "--model", str(tiny_model)]) == 0, capsys.readouterr().out
    assert "5 requests, 3 spans: identical to the recording" in capsys.readouterr().out


def test_a_replay_that_lost_the_retry_says_so(anthropic_recording, tiny_model, tmp_path, capsys):
    changed = with_a_retry_of_the_second_call(anthropic_recording)
    changed.spans[1].retried_at = []  # as if the recording had been made without the retry answered from it
    path = tmp_path / "changed.jsonl"
    changed.save(path)
    capsys.readouterr()
    assert main(["replay", "run", str(path), "--model", str(tiny_model)]) == 1
    assert "span 1.retried_at: recorded 0, replayed 1" in capsys.readouterr().out
