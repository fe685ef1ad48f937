"""Several policy replicas: every call of a rollout goes to one replica, rollouts spread evenly, and
`GET /control/replicas` counts what each served. Two stand-in servers (`--policy-url` twice), one
server with vLLM data-parallel ranks (`--data-parallel-size`), and a proxy with two workers."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import httpx
import openai
import pytest

from testkit.proxy_script import proxy_args
from testkit.servers import start_server
from tests.proxy.conftest import standin
from veri.services.proxy.cli import register_serve, settings_from_args
from veri.services.proxy.control_client import ControlClient

SESSIONS, TURNS = 4, 3


def run_rollouts(control: ControlClient) -> dict[str, list]:
    """SESSIONS rollouts of TURNS calls each, interleaved turn by turn: rollout id -> its spans."""
    sessions = [control.open_session() for _ in range(SESSIONS)]
    conversations = {s.rollout_id: [] for s in sessions}
    for turn in range(TURNS):
        for number, session in enumerate(sessions):
            messages = conversations[session.rollout_id]
            messages.append({"role": "user", "content": f"rollout {number} turn {turn}: go on"})
            client = openai.OpenAI(base_url=session.openai_base_url, api_key=session.api_key, max_retries=0)
            reply = client.chat.completions.create(model="p", messages=messages)
            messages.append({"role": "assistant", "content": reply.choices[0].message.content})
    return {s.rollout_id: control.spans(s.rollout_id) for s in sessions}


def recorded(url: str) -> list[dict]:
    return httpx.get(f"{url}/standin/requests").json()


@pytest.mark.needs("process")
@pytest.mark.parametrize("workers", [1, 2])
def test_each_rollout_stays_on_one_server(reply_ids, tiny_model, tmp_path, workers):
    with standin(reply_ids, "--record", "--prefix-cache", "4") as first, \
            standin(reply_ids, "--record", "--prefix-cache", "4") as second:
        args = proxy_args(first, tiny_model, tmp_path, "--policy-url", second, "--workers", str(workers))
        with start_server(args) as proxy:
            control = ControlClient(proxy.url)
            spans = run_rollouts(control)
            stats = control.replicas()
        prompts = {index: [r["prompt"] for r in recorded(url)] for index, url in enumerate([first, second])}

    pinned = {}
    for rollout, its_spans in spans.items():
        assert len(its_spans) == TURNS and {s.replica for s in its_spans} == {its_spans[0].replica}, rollout
        pinned[rollout] = its_spans[0].replica
        for span in its_spans:  # each call reached the server its span names, and no other
            assert span.prompt_token_ids in prompts[span.replica]
            assert span.prompt_token_ids not in prompts[1 - span.replica]
        assert [s.prompt_source for s in its_spans[1:]] == ["bridged"] * (TURNS - 1)
    assert sorted(Counter(pinned.values()).values()) == [2, 2]

    assert [(s.replica, s.url, s.rank, s.failed_requests) for s in stats] == [(0, first, None, 0), (1, second, None, 0)]
    for s in stats:
        mine = [span for its_spans in spans.values() for span in its_spans if span.replica == s.replica]
        assert (s.sessions, s.open_sessions, s.requests) == (2, 2, 2 * TURNS) == (2, 2, len(prompts[s.replica]))
        assert s.prompt_tokens == sum(len(span.prompt_token_ids) for span in mine)
        assert s.cached_prompt_tokens == sum(span.cached_prompt_tokens for span in mine) > 0
        assert s.hit_rate == pytest.approx(s.cached_prompt_tokens / s.prompt_tokens)


@pytest.mark.needs("process")
def test_data_parallel_ranks_are_pinned_by_header(reply_ids, tiny_model, tmp_path):
    with standin(reply_ids, "--record") as policy:
        with start_server(proxy_args(policy, tiny_model, tmp_path, "--data-parallel-size", "2")) as proxy:
            control = ControlClient(proxy.url)
            spans = run_rollouts(control)
            stats = control.replicas()
        requests = recorded(policy)

    rank_of = {tuple(r["prompt"]): r["rank"] for r in requests}
    assert len(rank_of) == len(requests) == SESSIONS * TURNS
    ranks = {}
    for rollout, its_spans in spans.items():
        (ranks[rollout],) = {rank_of[tuple(span.prompt_token_ids)] for span in its_spans}
        assert {span.replica for span in its_spans} == {ranks[rollout]}  # replica i = rank i on one server
    assert sorted(Counter(ranks.values()).items()) == [(0, 2), (1, 2)]
    assert [(s.replica, s.url, s.rank, s.requests, s.sessions) for s in stats] == [
        (0, policy, 0, 2 * TURNS, 2), (1, policy, 1, 2 * TURNS, 2)]
    assert all(s.cached_prompt_tokens is None and s.hit_rate is None for s in stats)  # not reported


@pytest.mark.needs("process")
def test_closed_sessions_free_their_replica(reply_ids, tiny_model, tmp_path):
    with standin(reply_ids) as first, standin(reply_ids) as second:
        with start_server(proxy_args(f"{first},{second}", tiny_model, tmp_path)) as proxy:
            control = ControlClient(proxy.url)
            first_session = control.open_session()  # replica 0
            control.open_session()  # replica 1
            control.close_session(first_session.rollout_id)
            control.open_session()  # replica 0 has no open session left: this one goes there
            stats = control.replicas()
    assert [(s.sessions, s.open_sessions) for s in stats] == [(2, 1), (1, 1)]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register_serve(parser.add_subparsers())
    return parser.parse_args(["proxy", "--model", "m", *argv])


def test_policy_url_flags(tmp_path: Path):
    one = settings_from_args(parse(["--policy-url", "http://p:8001/"]))
    assert (one.policy_url, one.policy_urls, one.replica_urls) == ("http://p:8001", [], ["http://p:8001"])
    several = settings_from_args(parse(["--policy-url", "http://a:1,http://b:1", "--policy-url", "http://c:1",
                                        "--data-parallel-size", "2"]))
    assert several.replica_urls == ["http://a:1", "http://b:1", "http://c:1"] and several.data_parallel_size == 2
    with pytest.raises(ValueError, match="twice"):
        settings_from_args(parse(["--policy-url", "http://a:1,http://a:1"]))
