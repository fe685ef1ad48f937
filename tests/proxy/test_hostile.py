"""Hostile input to the rollout routes (docs/reliability.md), CI-sized: each case of
bench/reliability/scenarios/proxy_hostile.py against the real proxy and policy of tests/proxy/conftest.py.
No 5xx, every refusal in its protocol's error shape naming what is wrong, nothing sampled for a
closed session, and open sessions that never close do not grow the proxy's memory."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from bench.reliability.scenarios import proxy_hostile as hostile
from testkit.servers import RunningServer
from veri.services.proxy.control_client import ControlClient

SESSIONS = 500  # CI-sized: the scenario opens 10k


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=300) as client:
        yield client


def _max_model_len(policy: RunningServer) -> int:
    return httpx.get(f"{policy.url}/v1/models", timeout=30).json()["data"][0]["max_model_len"]


CASES = hostile.hostile_cases(max_model_len=32768, tools=10_000)


@pytest.mark.needs("process")
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_hostile_request_gets_its_answer(case: hostile.Case, proxy: RunningServer, scripted_policy: RunningServer,
                                         control: ControlClient, client: httpx.Client) -> None:
    # The cases are built for 32768 tokens of context: the tiny model's, checked here.
    assert _max_model_len(scripted_policy) == 32768
    session = control.open_session()
    reply = hostile.send(client, session, case)
    assert hostile.case_problem(case, reply) is None, hostile.case_problem(case, reply)
    assert hostile.span_problem(control, session, case, reply.status_code) is None


@pytest.mark.needs("process")
def test_closed_session_refused_on_every_route(control: ControlClient, client: httpx.Client) -> None:
    assert hostile.closed_session_problems(client, control) == []


@pytest.mark.needs("process")
def test_unknown_route_or_method_refused_in_protocol_shape(control: ControlClient, client: httpx.Client) -> None:
    assert hostile.route_problems(client, control) == []


def test_error_shape_check_catches_a_foreign_shape() -> None:
    """The shape check itself: FastAPI's default `{"detail": ...}` and a plain-text 500 are caught."""
    assert hostile.answer_problem("/r/x/v1/chat/completions", 422, b'{"detail": "bad"}') is not None
    assert hostile.answer_problem("/r/x/v1/messages", 400, b'{"error": {"type": "x", "message": "m"}}') is not None
    assert hostile.answer_problem("/r/x/v1/responses", 500, b"Internal Server Error") is not None
    assert hostile.answer_problem("/r/x/v1/messages", 400,
                                  b'{"type": "error", "error": {"type": "x", "message": "m"}}') is None


@pytest.mark.needs("process")
def test_open_sessions_never_closed_keep_memory_bounded(proxy: RunningServer, control: ControlClient,
                                                        client: httpx.Client) -> None:
    before, after, problems = hostile.session_flood(control, client, proxy.process.pid, SESSIONS)
    assert problems == [], problems
    assert after - before < hostile.RSS_GROWTH_LIMIT_MB
