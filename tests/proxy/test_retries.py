"""A client's retry does not fork a rollout (docs/branches.md): the SDKs' own retries (openai and
anthropic `max_retries`, after their timeout or a 503) through the proxy, against the vLLM stand-in
made slow or failing once. The retry is answered from the first try's span (no second sample, no
second branch, no history_rewritten) and the span records it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import httpx2
import openai
import orjson
import pytest

from testkit.proxy_script import proxy_args
from testkit.servers import start_server
from testkit.spans import make_span
from tests.proxy.conftest import standin
from tests.proxy.test_app import open_session, policy_standin, proxy_client, settings_for
from veri.core.episodes import build_episode
from veri.core.records import SessionInfo, Span
from veri.core.rules import Rule
from veri.services.proxy.control_client import ControlClient
from veri.services.proxy.history import IDEMPOTENCY_HEADER, RETRY_COUNT_HEADER, request_key
from veri.services.proxy.long_texts import TEXT_KEYS
from veri.services.proxy.store import SpanStore

SLOW_S = 3.0  # the policy's delay on a slow call
CLIENT_TIMEOUT_S = 2.0  # the SDK gives up on a try after this, and retries


class Policy:
    def __init__(self, url: str) -> None:
        self.url = url

    def next_reply(self, **shape) -> None:
        httpx.put(f"{self.url}/standin/reply", json=shape, timeout=5).raise_for_status()

    def calls(self) -> int:
        return len(httpx.get(f"{self.url}/standin/requests", timeout=5).json())


@pytest.fixture(scope="module")
def stack(reply_ids: list[int], tiny_model: Path, tmp_path_factory) -> Iterator[tuple[Policy, ControlClient]]:
    with standin(reply_ids, "--record") as policy_url:
        args = proxy_args(policy_url, tiny_model, tmp_path_factory.mktemp("spans"))
        with start_server(args) as proxy:
            yield Policy(policy_url), ControlClient(proxy.url)


class Tries:
    """Counts every HTTP try an SDK makes (its first and each retry)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, request: httpx.Request | httpx2.Request) -> None:
        self.count += 1


def openai_client(session: SessionInfo, tries: Tries, **options) -> openai.OpenAI:
    return openai.OpenAI(base_url=session.openai_base_url, api_key=session.api_key, max_retries=3,
                         timeout=CLIENT_TIMEOUT_S, http_client=httpx.Client(event_hooks={"request": [tries]}),
                         **options)


def rewritten(spans) -> list:
    return [v for v in build_episode(spans).verdicts if v.rule == Rule.HISTORY_REWRITTEN]


@pytest.mark.needs("process")
def test_an_openai_retry_after_its_timeout_is_answered_from_the_first_try(stack):
    policy, control = stack
    session = control.open_session()
    tries = Tries()
    before = policy.calls()
    policy.next_reply(delay_s=SLOW_S, times=1)
    reply = openai_client(session, tries).chat.completions.create(
        model="policy", messages=[{"role": "user", "content": "hello"}])
    assert tries.count >= 2  # the SDK did time out and retry
    [span] = control.spans(session.rollout_id)  # one span: no second branch
    assert policy.calls() - before == 1  # one sample
    assert len(span.retried_at) == tries.count - 1
    assert all(span.started_at < at for at in span.retried_at)
    assert reply.id == span.response["id"]  # the recorded response itself
    assert reply.choices[0].message.content == span.response["choices"][0]["message"]["content"]
    assert span.client_retry_count == 0  # the first try, which was sampled


@pytest.mark.needs("process")
def test_a_legacy_completions_retry_is_answered_from_the_first_try(stack):
    policy, control = stack
    session = control.open_session()
    tries = Tries()
    before = policy.calls()
    policy.next_reply(delay_s=SLOW_S, times=1)
    reply = openai_client(session, tries).completions.create(model="policy", prompt="Once upon a time")
    assert tries.count >= 2
    [span] = control.spans(session.rollout_id)
    assert policy.calls() - before == 1 and len(span.retried_at) == tries.count - 1
    assert reply.id == span.response["id"] and span.client_retry_count == 0


@pytest.mark.needs("process")
def test_an_anthropic_streamed_retry_after_its_timeout_replays_the_recorded_response(stack):
    policy, control = stack
    session = control.open_session()
    tries = Tries()
    before = policy.calls()
    policy.next_reply(delay_s=SLOW_S, times=1)
    client = anthropic.Anthropic(base_url=session.anthropic_base_url, api_key=session.api_key, max_retries=3,
                                 timeout=CLIENT_TIMEOUT_S, http_client=httpx2.Client(event_hooks={"request": [tries]}))
    with client.messages.stream(model="policy", max_tokens=64,
                                messages=[{"role": "user", "content": "hello"}]) as stream:
        message = stream.get_final_message()
    assert tries.count >= 2
    [span] = control.spans(session.rollout_id)
    assert policy.calls() - before == 1
    assert len(span.retried_at) == tries.count - 1
    assert message.id == span.response["id"]
    assert [block.text for block in message.content] == [block["text"] for block in span.response["content"]]


@pytest.mark.needs("process")
def test_a_responses_retry_gets_the_recorded_id_a_later_call_can_continue(stack):
    policy, control = stack
    session = control.open_session()
    tries = Tries()
    client = openai_client(session, tries)
    policy.next_reply(delay_s=SLOW_S, times=1)
    first = client.responses.create(model="policy", input="hello")
    assert tries.count >= 2
    [span] = control.spans(session.rollout_id)
    assert first.id == span.response["id"] and len(span.retried_at) == tries.count - 1
    client.responses.create(model="policy", input="and then?", previous_response_id=first.id)
    spans = control.spans(session.rollout_id)
    assert len(spans) == 2 and spans[1].bridged_from == 0 and rewritten(spans) == []


@pytest.mark.needs("process")
def test_a_retry_mid_conversation_keeps_one_bridged_chain(stack):
    policy, control = stack
    session = control.open_session()
    tries = Tries()
    client = openai_client(session, tries)
    messages = [{"role": "user", "content": "first"}]
    for turn in range(3):
        if turn == 1:
            policy.next_reply(delay_s=SLOW_S, times=1)
        reply = client.chat.completions.create(model="policy", messages=messages)
        messages += [reply.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": f"n{turn}"}]
    assert tries.count >= 4  # 3 calls, the second retried
    spans = control.spans(session.rollout_id)
    assert [span.request_index for span in spans] == [0, 1, 2]
    assert [len(span.retried_at) for span in spans] == [0, tries.count - 3, 0]
    assert [span.bridged_from for span in spans] == [None, 0, 1]
    assert rewritten(spans) == []
    assert build_episode(spans).chain == [0, 1, 2]


@pytest.mark.needs("process")
def test_a_retry_after_a_503_samples_and_the_span_says_it_was_a_retry(stack):
    policy, control = stack
    session = control.open_session()
    tries = Tries()
    before = policy.calls()
    policy.next_reply(finish_reason="abort", times=1)  # vLLM aborted the call: the proxy answers 503, no span
    openai_client(session, tries).chat.completions.create(model="policy",
                                                          messages=[{"role": "user", "content": "hello"}])
    assert tries.count == 2
    [span] = control.spans(session.rollout_id)
    assert policy.calls() - before == 2  # the aborted call and the retry's
    assert span.client_retry_count == 1 and span.retried_at == []


@pytest.mark.needs("process")
def test_the_sdk_asking_again_on_purpose_samples_again(stack):
    # Each create() is a new call (retry count 0), even with the same body: a harness may re-ask.
    policy, control = stack
    session = control.open_session()
    before = policy.calls()
    client = openai_client(session, Tries())
    replies = [client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "again"}])
               for _ in range(2)]
    spans = control.spans(session.rollout_id)
    assert len(spans) == 2 and all(span.retried_at == [] for span in spans)
    assert policy.calls() - before == 2 and replies[0].id != replies[1].id  # two samples, two replies


@pytest.mark.needs("process")
def test_the_anthropic_sdk_asking_again_on_purpose_samples_again(stack):
    policy, control = stack
    session = control.open_session()
    before = policy.calls()
    client = anthropic.Anthropic(base_url=session.anthropic_base_url, api_key=session.api_key, max_retries=3)
    replies = [client.messages.create(model="policy", max_tokens=64, messages=[{"role": "user", "content": "again"}])
               for _ in range(2)]
    spans = control.spans(session.rollout_id)
    assert len(spans) == 2 and all(span.retried_at == [] for span in spans)
    assert [span.client_retry_count for span in spans] == [0, 0]
    assert policy.calls() - before == 2 and replies[0].id != replies[1].id


@pytest.mark.needs("process")
def test_only_a_resend_the_client_marks_as_a_retry_is_answered_from_its_span(stack):
    """No retry count (a client that is not an SDK) and a count of 0 are new calls, sampled; a count of 1 or
    more, or an idempotency key sent again, is answered from the latest span of that request."""
    policy, control = stack
    session = control.open_session()
    url = f"{session.openai_base_url}/chat/completions"
    body = {"model": "policy", "messages": [{"role": "user", "content": "hello"}]}
    headers = {"authorization": f"Bearer {session.api_key}"}
    before = policy.calls()

    def post(extra: dict[str, str], sent: dict | None = None) -> dict:
        reply = httpx.post(url, json=sent or body, headers={**headers, **extra}, timeout=30)
        assert reply.status_code == 200
        return reply.json()

    first = post({})
    again = post({}, dict(reversed(body.items())))  # the same body (keys reordered), unmarked: a new sample
    assert again["id"] != first["id"] and len(control.spans(session.rollout_id)) == 2
    assert post({RETRY_COUNT_HEADER: "0"})["id"] not in (first["id"], again["id"])
    assert post({RETRY_COUNT_HEADER: "2"}) == post({RETRY_COUNT_HEADER: "1"})  # marked: the latest span's reply
    named = post({IDEMPOTENCY_HEADER: "call-7"})
    assert post({IDEMPOTENCY_HEADER: "call-7"}) == named  # the same key again: its retry
    assert post({IDEMPOTENCY_HEADER: "call-8"})["id"] != named["id"]  # another key: another call
    spans = control.spans(session.rollout_id)
    assert policy.calls() - before == len(spans) == 5
    assert [len(span.retried_at) for span in spans] == [0, 0, 2, 1, 0]


def test_a_retry_reaching_another_worker_waits_for_the_first_try(reply_ids, tiny_model, tmp_path):
    """Two proxy apps over one store (as two workers): the retry reaches the one that is not sampling."""
    async def scenario() -> None:
        async with policy_standin(reply_ids) as (url, standin), \
                proxy_client(settings_for(url, tiny_model, tmp_path)) as first_worker, \
                proxy_client(settings_for(url, tiny_model, tmp_path)) as second_worker:
            session = await open_session(first_worker)
            standin.shape, standin.shape_left = {"delay_s": 1.5}, 1
            path = f"/r/{session.rollout_id}/v1/chat/completions"
            body = {"model": "p", "messages": [{"role": "user", "content": "hello"}]}
            headers = {"authorization": f"Bearer {session.api_key}"}
            first_try = asyncio.create_task(first_worker.post(path, json=body,
                                                              headers={**headers, RETRY_COUNT_HEADER: "0"}))
            while not standin.requests:  # the first try is with the policy
                await asyncio.sleep(0.01)
            retry = await second_worker.post(path, json=body, headers={**headers, RETRY_COUNT_HEADER: "1"})
            assert retry.json() == (await first_try).json()
            [span] = [Span.model_validate(s) for s in
                      (await second_worker.get(f"/control/sessions/{session.rollout_id}/spans")).json()]
            assert len(standin.requests) == 1 and len(span.retried_at) == 1

    asyncio.run(scenario())


def test_the_store_answers_for_the_latest_try_of_a_request(tmp_path):
    store = SpanStore(tmp_path)
    store.open_session("r-1", {})
    first = store.begin_request("r-1", "key")
    store.add_span(make_span(0, [1, 2], [3]), prefix_hash="h0", n_messages=1, answers=first)
    assert store.answered_request("r-1", "key", in_flight_since=0.0) == 0
    again = store.begin_request("r-1", "key")  # the client asked again on purpose (retry count 0)
    assert store.answered_request("r-1", "key", in_flight_since=0.0) == -1  # its retry waits for it
    assert store.answered_request("r-1", "key", in_flight_since=time.time() + 1) == 0  # taken for lost
    store.drop_request(again)  # it failed: no span
    assert store.answered_request("r-1", "key", in_flight_since=0.0) == 0
    assert store.answered_request("r-1", "other", in_flight_since=0.0) is None
    assert store.add_retry("r-1", 0, 5.0).retried_at == [5.0]
    assert store.spans("r-1")[0].retried_at == [5.0]
    store.close()


def test_a_request_key_counts_long_strings_by_key_and_where_they_are():
    system = "You are a careful agent. " * 100  # a long text: it counts by its key (long_texts.TEXT_KEYS)
    body = {"model": "m", "messages": [{"role": "system", "content": system}, {"role": "user", "content": "hi"}]}
    path = "/r/x/v1/chat/completions"
    assert request_key(path, body) == request_key(path, dict(reversed(body.items())))  # key order aside
    assert request_key(path, body) == request_key(path, orjson.loads(orjson.dumps(body)))  # another copy
    holding_the_key = {**body, "messages": [{"role": "system", "content": TEXT_KEYS.key(system)},
                                            body["messages"][1]]}
    assert request_key(path, holding_the_key) != request_key(path, body)
    other_text = {**body, "messages": [{"role": "system", "content": system + "!"}, body["messages"][1]]}
    assert request_key(path, other_text) != request_key(path, body)
