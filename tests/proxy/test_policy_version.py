"""Backends that report no policy version (vLLM): the trainer announces it and spans carry it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import openai
from transformers import AutoTokenizer

from tests.proxy.conftest import proxy_args
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
