"""The official `openai` SDK against the capture proxy: plain, streaming, tool loops, completions."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from transformers import AutoTokenizer

from testkit.proxy_script import WEATHER_TOOL, fake_weather
from tests.proxy.conftest import assert_bridged_chain
from veri.services.proxy.timing import WORKER_PID_HEADER

pytestmark = pytest.mark.needs("process")


def client_for(session) -> openai.OpenAI:
    return openai.OpenAI(base_url=session.openai_base_url, api_key=session.api_key, max_retries=0)


def test_plain_chat_records_exact_tokens(session, control, tiny_model):
    client = client_for(session)
    reply = client.chat.completions.create(
        model="policy", messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}],
        temperature=0.0, max_tokens=4096,
    )
    choice = reply.choices[0]
    assert choice.finish_reason in {"stop", "length"}
    assert reply.usage.completion_tokens > 0

    [span] = control.spans(session.rollout_id)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    expected_prompt = tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}],
        add_generation_prompt=True, tokenize=True, return_dict=False,
    )
    assert span.prompt_token_ids == list(expected_prompt)
    assert span.prompt_source == "full_render"
    assert span.token_fidelity == "captured"
    assert len(span.completion_token_ids) == len(span.completion_logprobs) == reply.usage.completion_tokens
    assert all(lp <= 0.0 for lp in span.completion_logprobs)
    # The job's sampling wins; the client's values are only recorded.
    assert span.sampling["temperature"] == 1.0 and span.sampling["max_tokens"] == 48
    assert span.request["temperature"] == 0.0
    assert span.response["choices"][0]["message"]["content"] == choice.message.content
    assert span.policy_version == 0


def test_streaming_chat_matches_recorded_response(session, control):
    client = client_for(session)
    stream = client.chat.completions.create(
        model="policy", messages=[{"role": "user", "content": "tell me a story"}], stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    usage = [c.usage for c in chunks if c.usage]
    [span] = control.spans(session.rollout_id)
    assert text == span.response["choices"][0]["message"]["content"]
    assert finish == [span.response["choices"][0]["finish_reason"]]
    assert usage and usage[0].completion_tokens == len(span.completion_token_ids)
    assert span.request["stream"] is True


def _run_tool_loop(client, *, stream: bool) -> list[str]:
    messages = [{"role": "user", "content": "What is the weather in Paris and London?"}]
    answers = []
    for _ in range(3):
        if stream:
            message = _collect_stream(client.chat.completions.create(
                model="policy", messages=messages, tools=[WEATHER_TOOL], stream=True))
        else:
            reply = client.chat.completions.create(model="policy", messages=messages, tools=[WEATHER_TOOL])
            message = reply.choices[0].message.model_dump(exclude_none=True)
        messages.append(message)
        if not message.get("tool_calls"):
            answers.append(message["content"])
            break
        for call in message["tool_calls"]:
            city = json.loads(call["function"]["arguments"])["city"]
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": fake_weather(city)})
    return answers


def _collect_stream(stream) -> dict:
    content, calls = "", {}
    for chunk in stream:
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for call in delta.tool_calls or []:
            entry = calls.setdefault(call.index, {"id": call.id, "type": "function",
                                                  "function": {"name": "", "arguments": ""}})
            entry["function"]["name"] += call.function.name or ""
            entry["function"]["arguments"] += call.function.arguments or ""
    message = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


def test_three_turn_tool_loop_is_bridged(session, control):
    answers = _run_tool_loop(client_for(session), stream=False)
    assert answers == ["Paris is sunny and London is rainy."]
    spans = control.spans(session.rollout_id)
    assert [s.response["choices"][0]["finish_reason"] for s in spans] == ["tool_calls", "tool_calls", "stop"]
    assert spans[0].reply_message["tool_calls"][0]["function"]["name"] == "get_weather"
    assert_bridged_chain(spans)


def test_streaming_tool_loop_is_bridged(session, control):
    answers = _run_tool_loop(client_for(session), stream=True)
    assert answers == ["Paris is sunny and London is rainy."]
    spans = control.spans(session.rollout_id)
    assert len(spans) == 3
    assert_bridged_chain(spans)


def test_rewritten_history_is_a_full_render_that_says_why(session, control):
    client = client_for(session)
    messages = [{"role": "user", "content": "What is the weather in Paris and London?"}]
    first = client.chat.completions.create(model="policy", messages=messages, tools=[WEATHER_TOOL]).choices[0].message
    call = first.tool_calls[0]
    rewritten = [{"role": "user", "content": "What is the weather in Paris and London? (edited)"},
                 first.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "sunny in Paris"}]
    client.chat.completions.create(model="policy", messages=rewritten, tools=[WEATHER_TOOL])
    spans = control.spans(session.rollout_id)
    assert spans[1].prompt_source == "full_render"
    assert "history rewritten" in spans[1].prompt_source_reason
    assert "message 0 (user) differs in content" in spans[1].prompt_source_reason


def test_legacy_completions_text_and_ids(session, control):
    client = client_for(session)
    by_text = client.completions.create(model="policy", prompt="Once upon a time", max_tokens=5)
    by_ids = client.completions.create(model="policy", prompt=[1, 2, 3, 4], max_tokens=5)
    assert by_text.choices[0].finish_reason in {"stop", "length"}
    assert by_ids.usage.prompt_tokens == 4
    spans = control.spans(session.rollout_id)
    assert [s.protocol for s in spans] == ["openai.completions"] * 2
    assert spans[1].prompt_token_ids == [1, 2, 3, 4]
    assert len(spans[0].completion_token_ids) <= 5


def test_models_lists_the_policy(session):
    models = client_for(session).models.list()
    assert [m.id for m in models.data] == ["tiny"]


def test_several_workers_share_sessions_through_the_store(scripted_policy, tiny_model, tmp_path):
    """Calls of one rollout land on different worker processes; bridging still works."""
    from testkit.proxy_script import proxy_args
    from testkit.servers import start_server
    from veri.services.proxy.control_client import ControlClient

    with start_server(proxy_args(scripted_policy.url, tiny_model, tmp_path, "--workers", "2")) as multi:
        control = ControlClient(multi.url)
        sessions = [control.open_session() for _ in range(2)]
        pinned = _connections_to_each_worker(sessions[0])
        clients = [_AlternatingClients(session, pinned) for session in sessions]
        for client in clients:
            assert _run_tool_loop(client, stream=False) == ["Paris is sunny and London is rainy."]
        for session in sessions:
            spans = control.spans(session.rollout_id)
            assert [s.request_index for s in spans] == [0, 1, 2]
            assert_bridged_chain(spans)
        for client in pinned.values():
            client.close()
    # Every rollout's calls were split between the two workers (which served each call is read from the
    # answer): the store, not a worker's memory, carried the session.
    served = [client.pids for client in clients]
    assert all(len(set(pids)) == 2 for pids in served), served


def _connections_to_each_worker(session, attempts: int = 64) -> dict[str, openai.OpenAI]:
    """One client per proxy worker: each keeps its one keep-alive connection, so it stays on the worker
    that accepted it (the kernel, not the test, picks which worker accepts a new connection)."""
    pinned: dict[str, openai.OpenAI] = {}
    for _ in range(attempts):
        # httpx drops a connection idle for 5 s, sooner than the kernel may take to hand a new one to
        # the other worker: a pinned connection must outlive the probing (the proxy keeps it 120 s).
        client = openai.OpenAI(base_url=session.openai_base_url, api_key=session.api_key, max_retries=0,
                               http_client=httpx.Client(limits=httpx.Limits(keepalive_expiry=100)))
        pid = client.models.with_raw_response.list().headers[WORKER_PID_HEADER]
        if pid in pinned:
            client.close()
        else:
            pinned[pid] = client
        if len(pinned) == 2:
            return pinned
    raise AssertionError(f"{attempts} new connections all reached worker(s) {sorted(pinned)}")


class _AlternatingClients:
    """Duck-types `client.chat.completions.create`, sending call k over the connection to worker k % 2
    (the session's key and URL on a pinned client), and keeps the pid of the worker that served each call."""

    def __init__(self, session, pinned: dict[str, openai.OpenAI]):
        self.chat = self
        self.completions = self
        self._clients = [client.with_options(base_url=session.openai_base_url, api_key=session.api_key)
                         for client in pinned.values()]
        self.pids: list[str] = []

    def create(self, **kwargs):
        client = self._clients[len(self.pids) % len(self._clients)]
        raw = client.chat.completions.with_raw_response.create(**kwargs)
        self.pids.append(raw.headers[WORKER_PID_HEADER])
        return raw.parse()


def test_unknown_template_falls_back_to_apply_chat_template(scripted_policy, tiny_model, tmp_path):
    """`--renderer default` (what an unknown model gets): every call is a full render that says why."""
    from testkit.proxy_script import proxy_args
    from testkit.servers import start_server
    from veri.services.proxy.control_client import ControlClient

    with start_server(proxy_args(scripted_policy.url, tiny_model, tmp_path, "--renderer", "default")) as fallback:
        control = ControlClient(fallback.url)
        session = control.open_session()
        client = client_for(session)
        messages = [{"role": "user", "content": "hello"}]
        first = client.chat.completions.create(model="p", messages=messages).choices[0].message
        client.chat.completions.create(
            model="p", messages=[*messages, {"role": "assistant", "content": first.content},
                                 {"role": "user", "content": "and again"}])
        spans = control.spans(session.rollout_id)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    assert spans[0].prompt_token_ids == list(tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False))
    assert [s.prompt_source for s in spans] == ["full_render", "full_render"]
    assert "cannot bridge" in spans[1].prompt_source_reason
