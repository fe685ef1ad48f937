"""`veri session open|spans|close` against a running proxy, as a user types them."""

from __future__ import annotations

import json
import subprocess
import sys

import openai
import pytest

pytestmark = pytest.mark.needs("process")


def veri(*args: str) -> dict | list:
    done = subprocess.run([sys.executable, "-m", "veri.cli", *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_open_call_inspect_close(proxy):
    opened = veri("session", "open", "--proxy", proxy.url)
    assert set(opened) >= {"rollout_id", "api_key", "openai_base_url", "anthropic_base_url"}
    client = openai.OpenAI(base_url=opened["openai_base_url"], api_key=opened["api_key"], max_retries=0)
    client.chat.completions.create(model="p", messages=[{"role": "user", "content": "hi"}])
    spans = veri("session", "spans", "--proxy", proxy.url, opened["rollout_id"])
    assert len(spans) == 1 and spans[0]["token_fidelity"] == "captured"
    closed = veri("session", "close", "--proxy", proxy.url, opened["rollout_id"])
    assert closed["status"] == "closed"


def test_unreachable_proxy_is_a_clear_error():
    done = subprocess.run([sys.executable, "-m", "veri.cli", "session", "open", "--proxy", "http://127.0.0.1:9"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "unreachable" in done.stderr and "Traceback" not in done.stderr
