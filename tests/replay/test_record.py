"""Recording a rollout: the proxy keeps a recording session's requests as sent (no other's), `veri
replay record` writes them with the spans, episode and reward, and `veri replay run` replays the file
through that proxy (exit 0) or shows what differs (exit 1).

The proxy is veri's own app on uvicorn; its policy is `veri replay policy`'s app serving the
checked-in Anthropic SDK recording, so the real SDK gets the same answers it got when recorded.
"""

from __future__ import annotations

import json

import pytest

from testkit.record_demos import URL_REWARD, anthropic_tool_loop
from tests.replay.conftest import replaying_proxy
from veri.cli import main
from veri.core.records import SessionInfo
from veri.services.proxy.control_client import ControlClient
from veri.tools.replay.recording import Recording


@pytest.fixture
def proxy_url(anthropic_recording, tiny_model, tmp_path):
    with replaying_proxy(anthropic_recording, tiny_model, tmp_path / "spans") as url:
        yield url


def test_record_then_replay_through_the_proxy(proxy_url, anthropic_recording, tmp_path, capsys):
    control = ControlClient(proxy_url)
    capsys.readouterr()
    assert main(["session", "open", "--proxy", proxy_url, "--record-requests"]) == 0
    recorded, unrecorded = SessionInfo.model_validate_json(capsys.readouterr().out), control.open_session()
    anthropic_tool_loop(recorded)
    anthropic_tool_loop(unrecorded)
    assert control.recorded_requests(unrecorded.rollout_id) == []

    out = tmp_path / "weather.jsonl"
    assert main(["replay", "record", "--proxy", proxy_url, "--rollout", recorded.rollout_id,
                 "--out", str(out)]) == 0
    recording = Recording.load(out)
    assert [(r.method, r.path, r.status) for r in recording.requests] == [
        ("POST", "/v1/messages/count_tokens", 200), *[("POST", "/v1/messages", 200)] * 3]
    first = recording.requests[1]
    question = {"role": "user", "content": "What is the weather in Paris and London?"}
    assert json.loads(first.body)["messages"] == [question]
    assert first.headers["anthropic-version"] and first.auth in ("bearer", "x-api-key")
    assert "x-api-key" not in first.headers and "authorization" not in first.headers
    assert [s.completion_token_ids for s in recording.spans] == [
        s.completion_token_ids for s in anthropic_recording.spans]
    assert recording.episode == anthropic_recording.episode

    capsys.readouterr()
    assert main(["replay", "run", str(out), "--proxy", proxy_url]) == 0
    assert "4 requests, 3 spans: identical to the recording" in capsys.readouterr().out

    # With the task and reward function: the reward is scored now and again on every replay.
    task = tmp_path / "task.json"
    task.write_text(json.dumps({"prompt": "weather?", "expected_url": "https://weather.test/"}))
    scored = tmp_path / "scored.jsonl"
    assert main(["replay", "record", "--proxy", proxy_url, "--rollout", recorded.rollout_id, "--out", str(scored),
                 "--task", str(task), "--reward", str(URL_REWARD)]) == 0
    recording = Recording.load(scored)
    assert recording.reward is not None and recording.reward.per_function == {"reward": 0.0}
    assert recording.rewards[0].file is None and "def reward(" in recording.rewards[0].source
    assert main(["replay", "run", str(scored), "--proxy", proxy_url]) == 0
    capsys.readouterr()

    assert main(["replay", "record", "--proxy", proxy_url, "--rollout", unrecorded.rollout_id,
                 "--out", str(tmp_path / "none.jsonl")]) == 1
    assert "open its session with record_requests" in capsys.readouterr().err


def test_run_prints_the_difference_and_fails(anthropic_recording, tiny_model, tmp_path, capsys):
    changed = anthropic_recording.model_copy(deep=True)
    changed.spans[1].prompt_token_ids[3] += 1  # as if the second call had rendered one token differently
    path = tmp_path / "changed.jsonl"
    changed.save(path)
    assert main(["replay", "run", str(path), "--model", str(tiny_model)]) == 1
    out = capsys.readouterr().out
    assert "differences from the recording" in out
    assert "span 1.prompt_token_ids: first difference at position 3" in out
    assert "if the change is intended, re-record" in out
