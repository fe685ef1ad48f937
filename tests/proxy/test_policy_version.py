"""Backends that report no policy version (vLLM): the trainer announces it and spans carry it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest
from transformers import AutoTokenizer

from testkit.proxy_script import proxy_args
from testkit.servers import free_port, start_server
from tests.proxy.conftest import standin
from veri.services.proxy.control_client import ControlClient

pytestmark = pytest.mark.needs("process")


def test_spans_carry_the_announced_version(tiny_model, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    reply = tokenizer.encode("hi", add_special_tokens=False) + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    port = free_port()
    standin = subprocess.Popen([sys.executable, str(Path(__file__).parents[1] / "vllm_standin.py"),
                                "--port", str(port), "--reply-ids", json.dumps(reply), "--no-version"])
    try:
        with start_server(proxy_args(f"http://127.0.0.1:{port}", tiny_model, tmp_path)) as proxy:
            control = ControlClient(proxy.url)
            session = control.open_session()
            client = openai.OpenAI(base_url=session.openai_base_url, api_key=session.api_key, max_retries=0)
            client.chat.completions.create(model="p", messages=[{"role": "user", "content": "a"}])
            control.set_policy_version(3)
            client.chat.completions.create(model="p", messages=[{"role": "user", "content": "b"}])
            assert [s.policy_version for s in control.spans(session.rollout_id)] == [0, 3]
    finally:
        standin.terminate()
        standin.wait()


def test_a_call_in_flight_across_an_update_completes_with_both_versions(reply_ids, tiny_model, tmp_path):
    """Asynchronous training: the trainer pauses vLLM, loads the weights, announces version k and
    resumes while calls are in flight. Such a call is answered (one try, no 503 for the SDK to retry)
    and its span carries the version it started under (the older, which bounds its staleness) and the
    one announced when it ended."""
    tries: list[httpx.Request] = []
    with standin(reply_ids, "--record") as policy_url, \
            start_server(proxy_args(policy_url, tiny_model, tmp_path)) as proxy:
        control = ControlClient(proxy.url)
        control.set_policy_version(2)
        session = control.open_session()
        httpx.put(f"{policy_url}/standin/reply", json={"delay_s": 2.0, "times": 1}, timeout=5).raise_for_status()
        client = openai.OpenAI(base_url=session.openai_base_url, api_key=session.api_key, max_retries=2,
                               http_client=httpx.Client(event_hooks={"request": [tries.append]}))
        with ThreadPoolExecutor(1) as pool:
            call = pool.submit(client.chat.completions.create, model="p", messages=[{"role": "user", "content": "a"}])
            deadline = time.monotonic() + 30
            while not httpx.get(f"{policy_url}/standin/requests", timeout=5).json():  # the call is with the policy
                assert time.monotonic() < deadline and not call.done(), "the call never reached the policy"
                time.sleep(0.05)
            control.set_policy_version(3)
            assert not call.done()  # the announcement came while it was sampled
            call.result(timeout=60)
        spans = control.spans(session.rollout_id)
    assert len(tries) == 1
    assert [(s.policy_version, s.policy_version_end) for s in spans] == [(2, 3)]
