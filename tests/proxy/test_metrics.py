"""The proxy's `/metrics`: real SDK calls through a two-worker proxy move its counters by exactly what
happened, summed over both workers; the route needs the control token; no rollout id or key leaks."""

from __future__ import annotations

import asyncio

import anthropic
import httpx
import openai
import pytest

from testkit.proxy_script import proxy_args
from testkit.servers import start_server
from tests.prometheus import Scrape
from tests.proxy.test_app import open_session, policy_standin, proxy_client, settings_for
from tests.proxy.test_openai_sdk import _AlternatingClients, _connections_to_each_worker, _run_tool_loop, client_for
from veri.services.proxy.app import create_app
from veri.services.proxy.control_client import ControlClient
from veri.services.proxy.rollout_routes import BY_TEMPLATE, MODELS, RESPONSES, ROUTES, ErrorShape
from veri.services.proxy.settings import ProxySettings
from veri.services.proxy.timing import WORKER_PID_HEADER

CHAT_ROUTE = "/r/{rollout_id}/v1/chat/completions"
MESSAGES_ROUTE = "/r/{rollout_id}/v1/messages"
COMPLETIONS_ROUTE = "/r/{rollout_id}/v1/completions"


def scrape_every_worker(url: str, workers: int) -> dict[str, Scrape]:
    """Scrape on fresh connections until each worker has answered once: pid -> its answer."""
    answers: dict[str, Scrape] = {}
    for _ in range(50):
        reply = httpx.get(f"{url}/metrics", headers={"connection": "close"}, timeout=10)
        assert reply.status_code == 200, reply.text
        answers[reply.headers[WORKER_PID_HEADER]] = Scrape(reply.text)
        if len(answers) == workers:
            return answers
    raise AssertionError(f"only workers {sorted(answers)} answered /metrics")


@pytest.mark.needs("process")
def test_two_workers_sum_what_the_sdks_did(scripted_policy, tiny_model, tmp_path):
    with start_server(proxy_args(scripted_policy.url, tiny_model, tmp_path, "--workers", "2")) as proxy:
        control = ControlClient(proxy.url)
        # OpenAI: four tool loops, three calls each (the first rendered, the next two bridged).
        sessions = [control.open_session() for _ in range(4)]
        pinned = _connections_to_each_worker(sessions[0])
        loops = [_AlternatingClients(session, pinned) for session in sessions]
        for loop in loops:
            assert _run_tool_loop(loop, stream=False) == ["Paris is sunny and London is rainy."]
        for client in pinned.values():
            client.close()
        # Anthropic: two sessions, one message each.
        for _ in range(2):
            session = control.open_session()
            with anthropic.Anthropic(base_url=session.anthropic_base_url, api_key=session.api_key,
                                     max_retries=0) as client:
                client.messages.create(model="policy", max_tokens=16, messages=[{"role": "user", "content": "hi"}])
        # Legacy completions, a wrong key, a closed session.
        session = control.open_session()
        with client_for(session) as client:
            client.completions.create(model="policy", prompt="Hello", max_tokens=4)
        with openai.OpenAI(base_url=session.openai_base_url, api_key="not-the-key", max_retries=0) as client, \
                pytest.raises(openai.AuthenticationError):
            client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}])
        control.close_session(session.rollout_id)
        with client_for(session) as client, pytest.raises(openai.ConflictError):
            client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}])

        answers = scrape_every_worker(proxy.url, workers=2)

    # Both workers served the SDKs' calls, and either one's /metrics holds all of them.
    assert len({pid for loop in loops for pid in loop.pids}) == 2
    for scrape in answers.values():
        chat = {"protocol": "openai.chat.completions"}
        assert scrape.value("veri_proxy_spans_total", **chat, prompt_source="full_render") == 4
        assert scrape.value("veri_proxy_spans_total", **chat, prompt_source="bridged") == 8
        assert scrape.value("veri_proxy_spans_total", protocol="anthropic.messages") == 2
        assert scrape.value("veri_proxy_spans_total", protocol="openai.completions") == 1
        assert scrape.value("veri_proxy_spans_flagged_total", rule="logprobs_absent") == 0
        assert scrape.value("veri_proxy_policy_call_seconds_count", replica="0", outcome="ok") == 15
        assert scrape.value("veri_proxy_policy_version") == 0

        assert scrape.value("veri_proxy_requests_total", route=CHAT_ROUTE, protocol="openai.chat.completions",
                            status="200") == 12
        assert scrape.value("veri_proxy_requests_total", route=CHAT_ROUTE, status="401") == 1
        assert scrape.value("veri_proxy_requests_total", route=CHAT_ROUTE, status="409") == 1
        assert scrape.value("veri_proxy_requests_total", route=MESSAGES_ROUTE, protocol="anthropic.messages") == 2
        assert scrape.value("veri_proxy_requests_total", route=COMPLETIONS_ROUTE, status="200") == 1
        assert scrape.value("veri_proxy_requests_total", route="/control/sessions", protocol="control") == 7
        assert scrape.value("veri_proxy_request_seconds_count", route=CHAT_ROUTE) == 14
        assert scrape.value("veri_proxy_requests_in_flight") == 0
        assert scrape.value("veri_proxy_refusals_total", reason="invalid_api_key", status="401") == 1
        assert scrape.value("veri_proxy_refusals_total", reason="session_closed", status="409") == 1
        assert scrape.value("veri_proxy_refusals_total") == 2

        # Bounded labels: route templates, never a rollout id or a key.
        assert scrape.label_values("veri_proxy_requests_total", "route") <= {
            CHAT_ROUTE, MESSAGES_ROUTE, COMPLETIONS_ROUTE, "/health", "/control/sessions",
            "/control/sessions/{rollout_id}/close", "/control/sessions/{rollout_id}/spans",
            "/r/{rollout_id}/v1/models"}  # the probes that found a connection to each worker
        for secret in [s.rollout_id for s in sessions] + [s.api_key for s in sessions]:
            assert secret not in scrape.text


@pytest.mark.needs("app")
def test_metrics_need_the_control_token_and_count_a_policy_outage(tiny_model, tmp_path):
    """In process: sandboxes reach the proxy's port, so /metrics is guarded like /control. A policy
    that is down is a refused call (503), a timed policy call that ended `unavailable`, and no span."""
    down = "http://127.0.0.1:9"  # nothing listens on the discard port

    async def scenario() -> None:
        guarded = create_app(ProxySettings(policy_url=down, model_dir=tiny_model, store_dir=tmp_path / "a",
                                           control_token="s3cret"))
        async with guarded.router.lifespan_context(guarded), httpx.AsyncClient(
                transport=httpx.ASGITransport(app=guarded), base_url="http://proxy") as client:
            assert (await client.get("/metrics")).status_code == 401
            assert (await client.get("/metrics", headers={"authorization": "Bearer wrong"})).status_code == 401
            token = {"authorization": "Bearer s3cret"}
            session = (await client.post("/control/sessions", headers=token)).json()
            reply = await client.post(f"/r/{session['rollout_id']}/v1/chat/completions",
                                      headers={"authorization": f"Bearer {session['api_key']}"},
                                      json={"model": "p", "messages": [{"role": "user", "content": "hi"}]})
            assert reply.status_code == 503
            answer = await client.get("/metrics", headers=token)
            assert answer.status_code == 200
            scrape = Scrape(answer.text)
            assert scrape.value("veri_proxy_refusals_total", reason="policy_unavailable", status="503") == 1
            assert scrape.value("veri_proxy_policy_call_seconds_count", outcome="unavailable") == 1
            assert scrape.value("veri_proxy_spans_total") == 0
            assert scrape.value("veri_proxy_requests_total", route=CHAT_ROUTE, status="503") == 1
            assert session["api_key"] not in answer.text and session["rollout_id"] not in answer.text

        # Without a token: loopback clients only, as for /control.
        open_app = create_app(ProxySettings(policy_url=down, model_dir=tiny_model, store_dir=tmp_path / "b"))
        async with open_app.router.lifespan_context(open_app):
            remote = httpx.ASGITransport(app=open_app, client=("10.1.2.3", 40000))
            async with httpx.AsyncClient(transport=remote, base_url="http://proxy") as client:
                assert (await client.get("/metrics")).status_code == 401
            local = httpx.ASGITransport(app=open_app)
            async with httpx.AsyncClient(transport=local, base_url="http://proxy") as client:
                assert (await client.get("/metrics")).status_code == 200

    asyncio.run(scenario())


@pytest.mark.needs("app")
def test_each_rollout_route_counts_and_refuses_as_its_declared_protocol(reply_ids, tiny_model, tmp_path):
    """A route's protocol is declared once (rollout_routes.py); its metrics labels and its
    error shape come from that declaration (a Responses call was counted as protocol `none`)."""
    app = create_app(settings_for("http://127.0.0.1:9", tiny_model, tmp_path / "a"))
    served = {path for path in app.openapi()["paths"] if path.startswith("/r/")}
    assert served == set(BY_TEMPLATE)  # every rollout route declared, and every declaration served

    async def scenario() -> None:
        async with policy_standin(reply_ids) as (url, _), \
                proxy_client(settings_for(url, tiny_model, tmp_path / "b")) as proxy:
            session = await open_session(proxy)
            base, key = f"/r/{session.rollout_id}", {"authorization": f"Bearer {session.api_key}"}
            reply = await proxy.post(f"{base}{RESPONSES.path}", headers=key, json={"model": "p", "input": "hi"})
            assert reply.status_code == 200, reply.text
            for route in ROUTES:
                method = "GET" if route is MODELS else "POST"
                refused = await proxy.request(method, f"{base}{route.path}", headers={"authorization": "Bearer no"},
                                              json={"model": "p"})
                assert refused.status_code == 401
                body = refused.json()
                if route.errors is ErrorShape.ANTHROPIC:
                    assert body["type"] == "error" and body["error"]["type"] == "authentication_error", route
                else:
                    assert body["error"]["type"] == "authentication_error" and "param" in body["error"], route
            scrape = Scrape((await proxy.get("/metrics")).text)

        responses = {"route": RESPONSES.template, "protocol": "openai.responses"}
        assert scrape.value("veri_proxy_requests_total", **responses, status="200") == 1
        assert scrape.value("veri_proxy_spans_total", protocol="openai.responses") == 1
        for route in ROUTES:
            assert scrape.value("veri_proxy_requests_total", route=route.template, protocol=str(route.protocol),
                                status="401") == 1
        assert "none" not in scrape.label_values("veri_proxy_requests_total", "protocol")

    asyncio.run(scenario())
