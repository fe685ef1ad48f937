"""Every refusal, in each protocol's own error shape; none records a span or wedges the proxy."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from testkit.proxy_script import proxy_args
from testkit.servers import free_port, start_server
from veri.services.proxy.control_client import ControlClient

pytestmark = pytest.mark.needs("process")


def oa(session, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=session.openai_base_url, api_key=kw.get("key", session.api_key), max_retries=0)


def an(session, **kw) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=session.anthropic_base_url, api_key=kw.get("key", session.api_key),
                               max_retries=0)


def test_image_content_is_refused_in_both_protocols(session, control):
    with pytest.raises(openai.BadRequestError) as oa_error:
        oa(session).chat.completions.create(model="p", messages=[{"role": "user", "content": [
            {"type": "text", "text": "what is this"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}])
    assert "'image_url'" in oa_error.value.message
    for block in ({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
                  {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}):
        with pytest.raises(anthropic.BadRequestError) as an_error:
            an(session).messages.create(model="p", max_tokens=8, messages=[{"role": "user", "content": [block]}])
        assert f"'{block['type']}'" in str(an_error.value)
        assert an_error.value.body["error"]["type"] == "invalid_request_error"
    assert control.spans(session.rollout_id) == []


def test_malformed_json_and_schema_are_400(session, control):
    headers = {"Authorization": f"Bearer {session.api_key}", "content-type": "application/json"}
    bad_json = httpx.post(f"{session.openai_base_url}/chat/completions", content=b"{not json", headers=headers)
    assert bad_json.status_code == 400 and bad_json.json()["error"]["type"] == "invalid_request_error"
    no_messages = httpx.post(f"{session.openai_base_url}/chat/completions", json={"model": "p"}, headers=headers)
    assert no_messages.status_code == 400 and "messages" in no_messages.json()["error"]["message"]
    bad_anthropic = httpx.post(f"{session.anthropic_base_url}/v1/messages", json={"messages": "nope"},
                               headers={"x-api-key": session.api_key})
    assert bad_anthropic.status_code == 400 and bad_anthropic.json()["type"] == "error"
    assert control.spans(session.rollout_id) == []


def test_unknown_rollout_wrong_key_closed_session(session, control, proxy):
    with pytest.raises(openai.NotFoundError):
        openai.OpenAI(base_url=f"{proxy.url}/r/nope/v1", api_key="x", max_retries=0).chat.completions.create(
            model="p", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.AuthenticationError):
        oa(session, key="not-the-key").chat.completions.create(model="p", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(anthropic.AuthenticationError):
        an(session, key="not-the-key").messages.create(model="p", max_tokens=8,
                                                       messages=[{"role": "user", "content": "hi"}])
    other = control.open_session()
    with pytest.raises(openai.AuthenticationError):  # another rollout's key does not open this one
        oa(session, key=other.api_key).chat.completions.create(model="p", messages=[{"role": "user", "content": "hi"}])
    control.close_session(session.rollout_id)
    with pytest.raises(openai.ConflictError):
        oa(session).chat.completions.create(model="p", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(anthropic.APIStatusError) as closed:
        an(session).messages.create(model="p", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert closed.value.status_code == 409
    assert control.spans(session.rollout_id) == []


def test_body_over_limit_is_413(scripted_policy, tiny_model, tmp_path):
    with start_server(proxy_args(scripted_policy.url, tiny_model, tmp_path, "--max-body-bytes", "65536")) as small:
        control = ControlClient(small.url)
        session = control.open_session()
        huge = "x" * 100_000
        with pytest.raises(openai.APIStatusError) as error:
            oa(session).chat.completions.create(model="p", messages=[{"role": "user", "content": huge}])
        assert error.value.status_code == 413
        with pytest.raises(anthropic.APIStatusError) as an_error:
            an(session).messages.create(model="p", max_tokens=8, messages=[{"role": "user", "content": huge}])
        assert an_error.value.status_code == 413
        assert an_error.value.body["error"]["type"] == "request_too_large"
        assert control.spans(session.rollout_id) == []
        # still serving
        assert oa(session).chat.completions.create(model="p", messages=[{"role": "user", "content": "hi"}]).choices


def test_policy_down_is_503_and_records_nothing(tiny_model, tmp_path):
    dead_policy = f"http://127.0.0.1:{free_port()}"
    with start_server(proxy_args(dead_policy, tiny_model, tmp_path)) as orphan:
        control = ControlClient(orphan.url)
        session = control.open_session()
        with pytest.raises(openai.InternalServerError) as error:
            oa(session).chat.completions.create(model="p", messages=[{"role": "user", "content": "hi"}])
        assert error.value.status_code == 503 and "unreachable" in error.value.message
        with pytest.raises(anthropic.APIStatusError) as an_error:
            an(session).messages.create(model="p", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
        assert an_error.value.status_code == 503
        assert control.spans(session.rollout_id) == []
        assert httpx.get(orphan.url + "/health").status_code == 200


def test_control_routes_need_the_token_when_one_is_set(scripted_policy, tiny_model, tmp_path):
    with start_server(proxy_args(scripted_policy.url, tiny_model, tmp_path),
                      env={"VERI_CONTROL_TOKEN": "s3cret"}) as guarded:
        with pytest.raises(Exception, match="401"):
            ControlClient(guarded.url).open_session()
        with pytest.raises(Exception, match="401"):
            ControlClient(guarded.url, token="wrong").open_session()
        session = ControlClient(guarded.url, token="s3cret").open_session()
        assert session.openai_base_url == f"{guarded.url}/r/{session.rollout_id}/v1"


def test_spans_survive_a_restart_and_bridging_continues(scripted_policy, tiny_model, tmp_path):
    port = free_port()
    args = proxy_args(scripted_policy.url, tiny_model, tmp_path)
    question = [{"role": "user", "content": "What is the weather in Paris and London?"}]
    from testkit.proxy_script import WEATHER_TOOL

    with start_server(args, port=port) as first:
        session = ControlClient(first.url).open_session()
        reply = oa(session).chat.completions.create(model="p", messages=question, tools=[WEATHER_TOOL])
    message = reply.choices[0].message
    follow_up = [*question, message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "sunny in Paris"}]
    with start_server(args, port=port) as second:
        oa(session).chat.completions.create(model="p", messages=follow_up, tools=[WEATHER_TOOL])
        spans = ControlClient(second.url).spans(session.rollout_id)
    assert len(spans) == 2
    assert spans[1].prompt_source == "bridged"
    assert spans[1].prompt_token_ids[: len(spans[0].prompt_token_ids)] == spans[0].prompt_token_ids
