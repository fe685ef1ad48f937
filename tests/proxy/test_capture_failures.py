"""A failed span write never strands the client (the span is written before the reply goes back). The proxy app runs
under uvicorn in this event loop over a real span store and the vLLM stand-in; the store's span write fails once with
SQLite's own error (inside the real `add_span`: its transaction rolled back, a 500), and the SDK's own
retry (openai, anthropic: `max_retries`) must be answered at once — sampled afresh, since the failed
try's completion reached no client — instead of waiting out the first try's in-flight note
(`policy_timeout_s` + 30 s). Afterwards exactly one span per completion the client received, the
earlier turn's intact and the retried one bridged from it. A failure after the span was committed is
answered from that span (no second sample). A store locked by another writer is a prompt 503."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anthropic
import httpx2
import openai
import pytest
import uvicorn
from fastapi import FastAPI

from testkit.servers import free_port
from tests.proxy.test_app import open_session as app_session
from tests.proxy.test_app import policy_standin, proxy_client, settings_for
from veri.core.records import SessionInfo, Span
from veri.services.proxy.app import create_app
from veri.services.proxy.capture import IN_FLIGHT_GRACE_S
from veri.services.proxy.errors import CaptureFailed
from veri.services.proxy.history import RETRY_COUNT_HEADER
from veri.services.proxy.rollout_routes import CHAT_COMPLETIONS, MESSAGES
from veri.services.proxy.settings import ProxySettings
from veri.services.proxy.store import BUSY_TIMEOUT_S, SpanStore

pytestmark = pytest.mark.needs("app")

# What a retry behind a stranded note waited: the default policy timeout and the grace (~630 s).
STRANDED_S = ProxySettings.model_fields["policy_timeout_s"].default + IN_FLIGHT_GRACE_S
# Generous against what the retry costs (the SDK's first backoff, <= 1 s, and one stand-in sample), far
# below STRANDED_S: a retry that waits for the dropped try fails here, 20 times sooner than it would end.
ANSWERED_WITHIN_S = STRANDED_S / 20


class FailingStatements:
    """The store's connection, but the next `times` statements starting with `sql` raise SQLite's own
    error, as a full disk or a lock held past the busy timeout does."""

    def __init__(self, db: sqlite3.Connection, sql: str, error: str, times: int = 1) -> None:
        self.db, self.sql, self.error, self.left = db, sql, error, times

    def _check(self, sql: str) -> None:
        if self.left and sql.lstrip().startswith(self.sql):
            self.left -= 1
            raise sqlite3.OperationalError(self.error)

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        self._check(sql)
        return self.db.execute(sql, *args)

    def executemany(self, sql: str, *args: Any) -> sqlite3.Cursor:
        self._check(sql)
        return self.db.executemany(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


@asynccontextmanager
async def proxy_server(settings: ProxySettings) -> AsyncIterator[tuple[str, FastAPI]]:
    """The proxy app under uvicorn in this event loop (real HTTP, so the SDKs' timeouts hold)."""
    app = create_app(settings)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), "the proxy did not start"
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}", app
    except BaseException:
        server.force_exit = True  # a failed test leaves a call stranded: do not wait for it
        raise
    finally:
        server.should_exit = True
        await task


class Tries:
    """Counts the HTTP tries an SDK makes (its first and each retry)."""

    def __init__(self) -> None:
        self.count = 0

    async def __call__(self, request: httpx2.Request) -> None:
        self.count += 1


async def chat_turns(session: SessionInfo, tries: Tries) -> Callable[[str], Any]:
    client = openai.AsyncOpenAI(base_url=session.openai_base_url, api_key=session.api_key, max_retries=2,
                                timeout=ANSWERED_WITHIN_S,
                                http_client=httpx2.AsyncClient(event_hooks={"request": [tries]}))
    messages: list[dict[str, Any]] = []

    async def turn(text: str) -> str:
        messages.append({"role": "user", "content": text})
        reply = await client.chat.completions.create(model="policy", messages=messages)
        messages.append(reply.choices[0].message.model_dump(exclude_none=True))
        return reply.id

    return turn


async def messages_turns(session: SessionInfo, tries: Tries) -> Callable[[str], Any]:
    client = anthropic.AsyncAnthropic(base_url=session.anthropic_base_url, api_key=session.api_key, max_retries=2,
                                      timeout=ANSWERED_WITHIN_S,
                                      http_client=httpx2.AsyncClient(event_hooks={"request": [tries]}))
    messages: list[dict[str, Any]] = []

    async def turn(text: str) -> str:
        messages.append({"role": "user", "content": text})
        reply = await client.messages.create(model="policy", max_tokens=32, messages=messages)
        messages.append({"role": "assistant", "content": [block.model_dump() for block in reply.content]})
        return reply.id

    return turn


async def responses_turns(session: SessionInfo, tries: Tries) -> Callable[[str], Any]:
    client = openai.AsyncOpenAI(base_url=session.openai_base_url, api_key=session.api_key, max_retries=2,
                                timeout=ANSWERED_WITHIN_S,
                                http_client=httpx2.AsyncClient(event_hooks={"request": [tries]}))
    previous: list[str] = []

    async def turn(text: str) -> str:
        reply = await client.responses.create(model="policy", input=text,
                                              previous_response_id=previous[-1] if previous else None)
        previous.append(reply.id)
        return reply.id

    return turn


PROTOCOLS = {"chat": chat_turns, "messages": messages_turns, "responses": responses_turns}


async def open_session(url: str) -> SessionInfo:
    async with httpx2.AsyncClient() as client:
        response = await client.post(f"{url}/control/sessions")
    assert response.status_code == 200, response.text
    return SessionInfo.model_validate(response.json())


def spans_of(store: SpanStore, session: SessionInfo) -> list[Span]:
    return store.spans(session.rollout_id)


def unanswered_notes(store: SpanStore) -> int:
    (count,) = store._db.execute("SELECT COUNT(*) FROM requests WHERE request_index IS NULL").fetchone()
    return count


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_retry_after_a_failed_span_write_is_sampled_afresh_at_once(protocol, reply_ids, tiny_model, tmp_path):
    async def scenario() -> None:
        async with policy_standin(reply_ids) as (policy_url, standin), \
                proxy_server(settings_for(policy_url, tiny_model, tmp_path)) as (url, app):
            store: SpanStore = app.state.capture.store
            session = await open_session(url)
            tries = Tries()
            turn = await PROTOCOLS[protocol](session, tries)
            await turn("hello")
            [first] = spans_of(store, session)

            failing = FailingStatements(store._db, "INSERT INTO spans", "database or disk is full")
            store._db = failing  # type: ignore[assignment]
            started = time.monotonic()
            reply_id = await asyncio.wait_for(turn("and then?"), ANSWERED_WITHIN_S)
            waited = time.monotonic() - started
            store._db = failing.db

            assert failing.left == 0 and tries.count == 3  # the write did fail, and the SDK retried once
            assert waited < ANSWERED_WITHIN_S
            assert len(standin.requests) == 3  # hello, the try whose span failed, the retry's fresh sample
            earlier, retried = spans_of(store, session)
            assert earlier == first  # what was captured before is intact
            assert retried.response["id"] == reply_id  # the one completion the client got has the span
            assert retried.client_retry_count == 1 and retried.retried_at == []
            assert retried.bridged_from == 0 and retried.prompt_source == "bridged"
            assert retried.prompt_token_ids == standin.requests[2]["prompt"]
            assert unanswered_notes(store) == 0

    asyncio.run(scenario())


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_retry_after_a_failure_past_the_commit_is_answered_from_the_kept_span(
        protocol, reply_ids, tiny_model, tmp_path, monkeypatch):
    async def scenario() -> None:
        async with policy_standin(reply_ids) as (policy_url, standin), \
                proxy_server(settings_for(policy_url, tiny_model, tmp_path)) as (url, app):
            capture = app.state.capture
            session = await open_session(url)
            tries = Tries()
            turn = await PROTOCOLS[protocol](session, tries)
            recorded, left = capture.metrics.span_recorded, [1]

            def fails_once(span: Span) -> None:  # after add_span committed: the span is kept
                if left[0]:
                    left[0] -= 1
                    raise RuntimeError("injected: a failure after the span was committed")
                recorded(span)

            monkeypatch.setattr(capture.metrics, "span_recorded", fails_once)
            reply_id = await asyncio.wait_for(turn("hello"), ANSWERED_WITHIN_S)
            assert left == [0] and tries.count == 2
            assert len(standin.requests) == 1  # no second sample
            [span] = spans_of(capture.store, session)
            assert span.response["id"] == reply_id and len(span.retried_at) == 1
            assert unanswered_notes(capture.store) == 0

    asyncio.run(scenario())


def test_a_note_the_store_cannot_drop_is_ignored_by_this_worker_and_deleted_later(tmp_path):
    store = SpanStore(tmp_path)
    store.open_session("r-1", {})
    note = store.begin_request("r-1", "key")
    failing = FailingStatements(store._db, "DELETE FROM requests", "database is locked")
    store._db = failing  # type: ignore[assignment]
    store.drop_request(note)  # the delete fails: no error, the note is kept as dropped
    store._db = failing.db
    assert failing.left == 0 and unanswered_notes(store) == 1
    assert store.answered_request("r-1", "key", in_flight_since=0.0) is None  # a retry here samples afresh
    assert unanswered_notes(store) == 0  # and the store call deleted it
    store.close()


def test_a_request_the_store_cannot_note_is_refused_as_a_capture_failure(tmp_path):
    store = SpanStore(tmp_path)
    store.open_session("r-1", {})
    store._db = FailingStatements(store._db, "INSERT INTO requests", "database or disk is full")  # type: ignore
    with pytest.raises(CaptureFailed, match="nothing was sampled"):
        store.begin_request("r-1", "key")
    store.close()


class LoopGaps:
    """The longest the event loop went without running this task: what a blocking store call costs
    every other call on the worker."""

    def __init__(self) -> None:
        self.longest, self.stopped = 0.0, False

    async def watch(self, last: float) -> None:
        while True:
            now = time.monotonic()
            self.longest, last = max(self.longest, now - last), now
            if self.stopped:
                return
            await asyncio.sleep(0.01)


@pytest.mark.parametrize("route", [CHAT_COMPLETIONS, MESSAGES], ids=["chat", "messages"])
def test_a_store_locked_by_another_writer_is_a_prompt_503_and_the_retry_is_answered(route, reply_ids, tiny_model,
                                                                                  tmp_path):
    """A write lock held elsewhere (another worker's long write, a tool with the file
    open) costs a call at most the store's busy timeout, refused with a retryable 503 in the route's
    own error shape, instead of blocking the worker's event loop (it waited 30 s)."""
    async def scenario() -> None:
        async with policy_standin(reply_ids) as (url, standin), \
                proxy_client(settings_for(url, tiny_model, tmp_path)) as proxy:
            session = await app_session(proxy)
            path = f"/r/{session.rollout_id}{route.path}"
            body = {"model": "p", "max_tokens": 16, "messages": [{"role": "user", "content": "hello"}]}
            key = {"authorization": f"Bearer {session.api_key}"}
            gaps = LoopGaps()
            watcher = asyncio.create_task(gaps.watch(time.monotonic()))  # counts from now, not its first run
            holder = sqlite3.connect(tmp_path / "spans.sqlite", isolation_level=None)
            holder.execute("BEGIN IMMEDIATE")  # the write lock, as another writer holds it
            try:
                refused = await proxy.post(path, json=body, headers={**key, RETRY_COUNT_HEADER: "0"})
            finally:
                holder.execute("ROLLBACK")
                holder.close()
                gaps.stopped = True
                await watcher  # its last gap counted: the one the call ended
            assert refused.status_code == 503, refused.text
            error = refused.json()["error"]
            assert error["type"] == ("overloaded_error" if route is MESSAGES else "service_unavailable")
            assert "locked by another writer" in error["message"] and "retry the call" in error["message"]
            assert gaps.longest < 10 * BUSY_TIMEOUT_S  # generous; the 30 s wait it replaces is 60 times that
            assert standin.requests == []  # nothing was sampled

            retry = await proxy.post(path, json=body, headers={**key, RETRY_COUNT_HEADER: "1"})
            assert retry.status_code == 200, retry.text
            [span] = (await proxy.get(f"/control/sessions/{session.rollout_id}/spans")).json()
            assert span["response"]["id"] == retry.json()["id"] and span["client_retry_count"] == 1

    asyncio.run(scenario())
