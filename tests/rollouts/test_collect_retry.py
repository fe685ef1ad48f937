"""The collector's control calls wait out a proxy that is restarting (no answer), never an answer."""

from __future__ import annotations

import threading
import time

import pytest

from testkit.servers import free_port, start_server
from veri.loop.collect.collect import until_proxy_answers
from veri.services.proxy.control_client import ControlClient, ControlError


@pytest.mark.needs("process")
def test_a_call_waits_for_the_proxy_to_come_back(tiny_model):
    port = free_port()
    control = ControlClient(f"http://127.0.0.1:{port}")
    up = threading.Event()
    done = threading.Event()

    def proxy_starts_late() -> None:
        time.sleep(1.0)
        with start_server(["serve", "proxy", "--model", str(tiny_model), "--policy-url", "http://127.0.0.1:9"],
                          port=port):
            up.set()
            done.wait(60)

    thread = threading.Thread(target=proxy_starts_late, daemon=True)
    thread.start()
    try:
        session = until_proxy_answers(control.open_session, wait_s=120)
        assert up.is_set() and session.rollout_id
        assert until_proxy_answers(lambda: control.spans(session.rollout_id)) == []
        with pytest.raises(ControlError) as refused:  # an answer, even an error, is final
            until_proxy_answers(lambda: control.spans("no-such-rollout"))
        assert refused.value.status == 404
    finally:
        done.set()
        thread.join(30)


def test_a_proxy_that_never_comes_back_fails_after_the_wait():
    control = ControlClient(f"http://127.0.0.1:{free_port()}")
    started = time.monotonic()
    with pytest.raises(ControlError, match="unreachable"):
        until_proxy_answers(control.open_session, wait_s=2)
    assert time.monotonic() - started < 10
