"""vLLM's other replies, through the real SDKs: repetition, missing logprobs, abort, error, cache hits.

What the span records and what the episode rules make of it; an aborted call is a retryable 503
that records nothing.
"""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest

from testkit.proxy_script import proxy_args
from testkit.servers import RunningServer, start_server
from tests.proxy.conftest import standin
from veri.core.episodes import build_episode
from veri.core.rules import Effect, Rule
from veri.services.proxy.control_client import ControlClient

pytestmark = pytest.mark.needs("process")

USER = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def policy(reply_ids) -> Iterator[str]:
    with standin(reply_ids, "--prefix-cache", "4") as url:
        yield url


@pytest.fixture(scope="module")
def proxy(policy, tiny_model, tmp_path_factory) -> Iterator[RunningServer]:
    with start_server(proxy_args(policy, tiny_model, tmp_path_factory.mktemp("spans"))) as server:
        yield server


@pytest.fixture
def control(proxy) -> ControlClient:
    return ControlClient(proxy.url)


def shape(policy: str, **reply) -> None:
    httpx.put(f"{policy}/standin/reply", json=reply).raise_for_status()


def chat(session, retries: int = 0):
    client = openai.OpenAI(base_url=session.openai_base_url, api_key=session.api_key, max_retries=retries)
    return client.chat.completions.create(model="p", messages=USER)


def test_repetition_is_recorded_as_sent_and_trained(policy, control):
    session = control.open_session()
    shape(policy, finish_reason="repetition", times=1)
    assert chat(session).choices[0].finish_reason == "length"  # cut short by the server
    (span,) = control.spans(session.rollout_id)
    assert span.finish_reason == "repetition" and not span.logprobs_absent
    episode = build_episode([span])
    assert episode.verdicts == [] and not episode.rejected


@pytest.mark.parametrize("logprobs", ["null", "null_entry"])
def test_missing_logprobs_answer_the_harness_and_reject_the_rollout(policy, control, logprobs):
    session = control.open_session()
    shape(policy, logprobs=logprobs, times=1)
    assert chat(session).choices[0].message.content == "hi"
    (span,) = control.spans(session.rollout_id)
    assert span.logprobs_absent and span.completion_logprobs == [] and span.completion_token_ids
    episode = build_episode([span])
    (verdict,) = episode.verdicts
    assert verdict.rule == Rule.LOGPROBS_ABSENT and verdict.effect == Effect.REJECT and verdict.span == 0
    assert "--logprobs-mode processed_logprobs" in verdict.fix
    assert episode.rejected and episode.row is None and episode.chain == [0]


@pytest.mark.parametrize("finish_reason", ["abort", "error"])
def test_an_aborted_call_is_a_retryable_503_that_records_nothing(policy, control, finish_reason):
    session = control.open_session()
    failed = control.replicas()[0].failed_requests
    shape(policy, finish_reason=finish_reason, times=1)
    with pytest.raises(openai.APIStatusError) as refused:
        chat(session)
    assert refused.value.status_code == 503 and "retry" in refused.value.message
    assert control.spans(session.rollout_id) == []
    shape(policy, finish_reason=finish_reason, times=1)
    assert chat(session, retries=1).choices[0].finish_reason == "stop"  # the SDK's own retry succeeds
    (span,) = control.spans(session.rollout_id)
    assert span.finish_reason == "stop" and span.request_index == 0
    assert control.replicas()[0].failed_requests == failed + 2  # both aborted calls count against it


def test_an_aborted_call_is_retryable_for_anthropic_too(policy, control):
    session = control.open_session()
    shape(policy, finish_reason="abort", times=1)
    client = anthropic.Anthropic(base_url=session.anthropic_base_url, api_key=session.api_key, max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as refused:
        client.messages.create(model="p", max_tokens=8, messages=USER)
    assert refused.value.status_code == 503 and refused.value.body["error"]["type"] == "overloaded_error"
    assert control.spans(session.rollout_id) == []


def test_raw_completions_map_repetition_and_record_it(policy, control):
    session = control.open_session()
    shape(policy, finish_reason="repetition", times=1)
    client = openai.OpenAI(base_url=session.openai_base_url, api_key=session.api_key, max_retries=0)
    assert client.completions.create(model="p", prompt=[1, 2, 3]).choices[0].finish_reason == "length"
    (span,) = control.spans(session.rollout_id)
    assert span.finish_reason == "repetition"


def test_cached_prompt_tokens_are_recorded_per_span(control):
    session = control.open_session()
    chat(session)
    client = openai.OpenAI(base_url=session.openai_base_url, api_key=session.api_key, max_retries=0)
    client.chat.completions.create(model="p", messages=[*USER, {"role": "assistant", "content": "hi"},
                                                        {"role": "user", "content": "and again"}])
    first, second = control.spans(session.rollout_id)
    assert second.prompt_source == "bridged"
    # The second prompt extends the first prompt + completion: the stand-in's cache covers those blocks.
    assert second.cached_prompt_tokens >= len(first.prompt_token_ids) // 4 * 4 > 0
    (stats,) = control.replicas()
    assert stats.rank is None and stats.cached_prompt_tokens >= second.cached_prompt_tokens
