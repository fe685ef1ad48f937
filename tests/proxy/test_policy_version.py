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
from transformers import AutoTokenizer

from tests.proxy.conftest import proxy_args, standin
from tests.servers import free_port, start_server
from veri.proxy.control_client import ControlClient


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


def test_a_call_sampled_across_an_announcement_is_retried_not_misattributed(reply_ids, tiny_model, tmp_path):
    """vLLM: the trainer announces version k once TRL synced its weights. A call that was with the policy
    when the announcement came was sampled by the old weights, the new, or both (vLLM reloads between
    engine steps): no version is true for it. It is a 503 with nothing recorded, and the SDK's retry is
    sampled afresh and carries the new version (stamped at recording, it was the new version: wrong)."""
    tries: list[httpx.Request] = []
    with standin(reply_ids) as policy_url, start_server(proxy_args(policy_url, tiny_model, tmp_path)) as proxy:
        control = ControlClient(proxy.url)
        control.set_policy_version(2)
        session = control.open_session()
        httpx.put(f"{policy_url}/standin/reply", json={"delay_s": 1.0, "times": 1}, timeout=5).raise_for_status()
        client = openai.OpenAI(base_url=session.openai_base_url, api_key=session.api_key, max_retries=2,
                               http_client=httpx.Client(event_hooks={"request": [tries.append]}))
        with ThreadPoolExecutor(1) as pool:
            call = pool.submit(client.chat.completions.create, model="p", messages=[{"role": "user", "content": "a"}])
            time.sleep(0.5)  # the first try is with the policy (its reply is 1 s late)
            control.set_policy_version(3)
            call.result(timeout=60)
        spans = control.spans(session.rollout_id)
    assert len(tries) == 2  # the first try was refused (503), the SDK retried
    assert [(s.policy_version, s.client_retry_count) for s in spans] == [(3, 1)]
