"""The proxy's request recorder: with --record-requests every session's requests are kept in arrival
order with the status they got (refusals too), bodies byte for byte; a body over the proxy's limit is
refused as before and not kept; a rollout that does not exist yet is not remembered as "not recording"."""

from __future__ import annotations

import httpx

from tests.replay.conftest import replaying_proxy
from veri.services.proxy.control_client import ControlClient

QUESTION = b'{"model": "policy",  "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}'


def test_every_session_is_recorded_as_sent(anthropic_recording, tiny_model, tmp_path):
    with replaying_proxy(anthropic_recording, tiny_model, tmp_path / "spans", record_requests=True,
                         max_body_bytes=4096) as url:
        control = ControlClient(url)
        early = httpx.post(f"{url}/r/r-later/v1/messages", content=QUESTION, headers={"x-api-key": "none"})
        assert early.status_code == 404
        session = control.open_session(rollout_id="r-later")  # opened after a call to its id was refused
        with httpx.Client(base_url=f"{url}/r/{session.rollout_id}",
                          headers={"x-api-key": session.api_key, "anthropic-version": "2023-06-01"}) as http:
            assert http.post("/v1/messages?beta=true", content=QUESTION).status_code == 200
            assert http.post("/v1/messages", content=b'{"model": ').status_code == 400
            assert http.post("/v1/messages", content=b"x" * 5000).status_code == 413
            assert http.post("/v1/messages/count_tokens", content=QUESTION).status_code == 200

        requests = control.recorded_requests(session.rollout_id)
        assert [(r.seq, r.path, r.query, r.status) for r in requests] == [
            (0, "/v1/messages", "beta=true", 200), (1, "/v1/messages", "", 400),
            (2, "/v1/messages/count_tokens", "", 200)]
        assert requests[0].body == QUESTION.decode()  # the bytes as sent (two spaces and all)
        assert all(r.received_at <= r.answered_at for r in requests)
        assert [r.seq for r in sorted(requests, key=lambda r: r.answered_at)] == [0, 1, 2]
        assert requests[0].auth == "x-api-key" and "x-api-key" not in requests[0].headers
        assert requests[0].headers["anthropic-version"] == "2023-06-01"
        assert len(control.spans(session.rollout_id)) == 1
