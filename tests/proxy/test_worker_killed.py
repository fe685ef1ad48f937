"""The proxy under gunicorn: a worker killed with -9 in the middle of a call is replaced by the master,
the client's retry of that call is sampled afresh (the dead worker's try in flight does not hold it)
and captured, the session's next call bridges from it, and /metrics drops the dead worker's in-flight
gauge (gunicorn's child_exit hook). A slow policy (the vLLM stand-in's delay) keeps the call in flight."""

from __future__ import annotations

import os
import signal
import time

import httpx
import openai
import psutil
import pytest

from testkit.proxy_script import proxy_args
from testkit.servers import start_server
from tests.logs import json_events, requests_logged
from tests.prometheus import Scrape
from tests.proxy.conftest import standin
from veri.services.proxy.control_client import ControlClient
from veri.services.proxy.timing import WORKER_PID_HEADER

pytestmark = pytest.mark.needs("process")

CHAT_ROUTE = "/r/{rollout_id}/v1/chat/completions"


def test_a_worker_killed_mid_call_is_replaced_and_the_session_goes_on(reply_ids, tiny_model, tmp_path):
    with standin(reply_ids) as policy_url, \
            start_server(proxy_args(policy_url, tiny_model, tmp_path, "--workers", "2")) as proxy:
        master = psutil.Process(proxy.process.pid)
        before = {worker.pid for worker in master.children()}
        assert len(before) == 2, before
        control = ControlClient(proxy.url)
        session = control.open_session()
        client = openai.OpenAI(base_url=session.openai_base_url, api_key=session.api_key, max_retries=3,
                               timeout=60)
        # The call goes over the keep-alive connection this answer came on: to that worker.
        victim = int(client.models.with_raw_response.list().headers[WORKER_PID_HEADER])
        assert victim in before
        httpx.put(f"{policy_url}/standin/reply", json={"delay_s": 5, "times": 1}).raise_for_status()

        messages = [{"role": "user", "content": "hello"}]
        with _kill_when_in_flight(proxy.url, victim):
            first = client.chat.completions.with_raw_response.create(model="tiny", messages=messages)

        # The SDK's retry (its connection was cut) was answered, by a live worker, and captured once.
        assert int(first.headers[WORKER_PID_HEADER]) != victim
        reply = first.parse().choices[0].message.content
        spans = control.spans(session.rollout_id)
        assert [(span.request_index, span.client_retry_count) for span in spans] == [(0, 1)]

        # The session's next call works and bridges from the span the retry left.
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": "again"}]
        client.chat.completions.create(model="tiny", messages=messages)
        spans = control.spans(session.rollout_id)
        assert [span.request_index for span in spans] == [0, 1]
        assert spans[1].prompt_source == "bridged", spans[1].prompt_source_reason

        after = _replaced(master, victim)
        assert len(after) == 2 and victim not in after and after - before, (before, after)
        scrape = Scrape(httpx.get(f"{proxy.url}/metrics", timeout=10).text)
        assert scrape.value("veri_proxy_requests_in_flight", route=CHAT_ROUTE) == 0
        assert scrape.value("veri_proxy_requests_total", route=CHAT_ROUTE, status="200") == 2

    # The proxy's whole log, gunicorn's master and both workers included, is one JSON event per line.
    events = json_events(proxy.log(), "proxy")
    assert any(event["event"] == f"Worker (pid:{victim}) was sent SIGKILL! Perhaps out of memory?"
               for event in events)
    assert any(event["status"] == 200 and event["route"] == CHAT_ROUTE for event in requests_logged(events))
    dropped = [event for event in events if event["event"].startswith("worker died mid-call")]
    assert [(event["worker_pid"], event["calls"]) for event in dropped] == [(victim, 1)]


class _kill_when_in_flight:
    """Kills `pid` with SIGKILL as soon as /metrics shows a chat call in flight (from a thread)."""

    def __init__(self, url: str, pid: int) -> None:
        import threading

        self.url, self.pid, self.killed_at = url, pid, None
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> _kill_when_in_flight:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.thread.join(timeout=30)
        assert self.killed_at is not None, "the call was never seen in flight"

    def _watch(self) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            scrape = Scrape(httpx.get(f"{self.url}/metrics", timeout=10).text)
            in_flight = [value for name, labels, value in scrape.samples
                         if name == "veri_proxy_requests_in_flight" and labels.get("route") == CHAT_ROUTE]
            if sum(in_flight) >= 1:
                os.kill(self.pid, signal.SIGKILL)
                self.killed_at = time.monotonic()
                return
            time.sleep(0.05)


def _replaced(master: psutil.Process, victim: int, timeout_s: float = 60) -> set[int]:
    deadline = time.monotonic() + timeout_s
    while True:
        workers = {worker.pid for worker in master.children()}
        if victim not in workers and len(workers) == 2 or time.monotonic() > deadline:
            return workers
        time.sleep(0.1)
