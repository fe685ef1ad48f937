"""The proxy in-process: `create_app(settings)` driven through httpx's ASGITransport (no proxy process,
no socket to it). The policy is tests/vllm_standin.py served by uvicorn in the same event loop, since
the proxy's policy client is aiohttp and talks to a real port. Capture (a chat call -> a span with the
exact ids) and the store (spans outlive the app; a later call is bridged from them) are checked here."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn
from transformers import AutoTokenizer

from testkit.servers import free_port
from tests.vllm_standin import Standin
from tests.vllm_standin import create_app as create_standin
from veri.core.records import SessionInfo, Span
from veri.services.proxy.app import create_app
from veri.services.proxy.settings import ProxySettings
from veri.services.proxy.store import SpanStore
from veri.services.proxy.timing import WORKER_PID_HEADER

pytestmark = pytest.mark.needs("app")

HELLO = [{"role": "user", "content": "hello"}]


@asynccontextmanager
async def policy_standin(reply_ids: list[int]) -> AsyncIterator[tuple[str, Standin]]:
    """The stand-in on a free port of this event loop: its URL and the app (which records requests)."""
    app = create_standin(reply_ids, report_version=False, record=True)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), "the stand-in did not start"
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        server.should_exit = True
        await task


@asynccontextmanager
async def proxy_client(settings: ProxySettings) -> AsyncIterator[httpx.AsyncClient]:
    """The proxy app with its lifespan run (ASGITransport does not run it), as a loopback client."""
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy", timeout=30) as client:
            yield client


async def open_session(proxy: httpx.AsyncClient) -> SessionInfo:
    response = await proxy.post("/control/sessions")
    assert response.status_code == 200, response.text
    return SessionInfo.model_validate(response.json())


async def chat(proxy: httpx.AsyncClient, session: SessionInfo, messages: list[dict], key: str | None = None):
    return await proxy.post(f"/r/{session.rollout_id}/v1/chat/completions",
                            headers={"authorization": f"Bearer {key or session.api_key}"},
                            json={"model": "p", "messages": messages})


async def spans(proxy: httpx.AsyncClient, session: SessionInfo) -> list[Span]:
    response = await proxy.get(f"/control/sessions/{session.rollout_id}/spans")
    return [Span.model_validate(span) for span in response.json()]


def settings_for(policy_url: str, model: Path, store: Path) -> ProxySettings:
    return ProxySettings(policy_url=policy_url, model_dir=model, store_dir=store, max_tokens=48)


def test_a_chat_call_records_a_span_with_the_exact_ids(reply_ids, tiny_model, tmp_path):
    async def scenario() -> None:
        async with policy_standin(reply_ids) as (url, standin), \
                proxy_client(settings_for(url, tiny_model, tmp_path)) as proxy:
            session = await open_session(proxy)
            response = await chat(proxy, session, HELLO)
            assert response.status_code == 200, response.text
            assert response.headers[WORKER_PID_HEADER] == str(os.getpid())
            assert response.json()["choices"][0]["message"]["content"] == "hi"
            [span] = await spans(proxy, session)
            [sent] = standin.requests

        tokenizer = AutoTokenizer.from_pretrained(tiny_model)
        expected = list(tokenizer.apply_chat_template(HELLO, add_generation_prompt=True, tokenize=True,
                                                      return_dict=False))
        # The ids the policy was sent and sampled are the span's, exactly.
        assert span.prompt_token_ids == sent["prompt"] == expected
        assert span.completion_token_ids == reply_ids
        assert span.completion_logprobs == [-0.5] * len(reply_ids)
        assert span.token_fidelity == "captured" and span.request_index == 0
        assert span.sampling["max_tokens"] == 48

    asyncio.run(scenario())


def test_the_store_outlives_the_app_and_bridges_the_next_call(reply_ids, tiny_model, tmp_path):
    async def scenario() -> None:
        async with policy_standin(reply_ids) as (url, _):
            async with proxy_client(settings_for(url, tiny_model, tmp_path)) as proxy:
                session = await open_session(proxy)
                assert (await chat(proxy, session, HELLO)).status_code == 200
            # A new app over the same store (a restart, or another worker) continues the session.
            async with proxy_client(settings_for(url, tiny_model, tmp_path)) as proxy:
                turns = [*HELLO, {"role": "assistant", "content": "hi"}, {"role": "user", "content": "again"}]
                assert (await chat(proxy, session, turns)).status_code == 200
                first, second = await spans(proxy, session)

        assert second.prompt_source == "bridged" and second.bridged_from == 0, second.prompt_source_reason
        assert second.prompt_token_ids[: len(first.prompt_token_ids) + len(reply_ids)] == (
            first.prompt_token_ids + first.completion_token_ids)
        store = SpanStore(tmp_path)
        try:
            assert [s.request_index for s in store.spans(session.rollout_id)] == [0, 1]
        finally:
            store.close()

    asyncio.run(scenario())


def test_a_wrong_key_is_refused_and_records_nothing(reply_ids, tiny_model, tmp_path):
    async def scenario() -> None:
        async with policy_standin(reply_ids) as (url, standin), \
                proxy_client(settings_for(url, tiny_model, tmp_path)) as proxy:
            session = await open_session(proxy)
            response = await chat(proxy, session, HELLO, key="not-the-key")
            assert response.status_code == 401, response.text
            assert await spans(proxy, session) == [] and standin.requests == []

    asyncio.run(scenario())
