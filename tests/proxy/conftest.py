"""Proxy fixtures: a real policy server (test-only scripted replies, so the random tiny model
makes the tool calls a test needs) and a real capture proxy in front of it; `standin` starts
tests/vllm_standin.py (vLLM's reply shapes, several replicas) instead."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from transformers import AutoTokenizer

from testkit.proxy_script import SCRIPT, proxy_args
from testkit.servers import RunningServer, free_port, start_server
from veri.core.records import SessionInfo
from veri.services.proxy.control_client import ControlClient


@pytest.fixture(scope="session")
def script_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("policy") / "script.json"
    path.write_text(json.dumps(SCRIPT))
    return path


@pytest.fixture(scope="session")
def scripted_policy(tiny_model: Path, script_file: Path) -> Iterator[RunningServer]:
    args = ["serve", "policy", "--model", str(tiny_model), "--scripted-replies", str(script_file)]
    with start_server(args) as server:
        yield server


@pytest.fixture(scope="session")
def proxy(scripted_policy: RunningServer, tiny_model: Path, tmp_path_factory) -> Iterator[RunningServer]:
    store = tmp_path_factory.mktemp("spans")
    with start_server(proxy_args(scripted_policy.url, tiny_model, store)) as server:
        yield server


@pytest.fixture
def control(proxy: RunningServer) -> ControlClient:
    return ControlClient(proxy.url)


@pytest.fixture
def session(control: ControlClient) -> SessionInfo:
    return control.open_session()


def assert_bridged_chain(spans) -> None:
    """Every later turn's prompt starts with the exact earlier prompt + completion ids."""
    for earlier, later in zip(spans, spans[1:], strict=False):
        prefix = earlier.prompt_token_ids + earlier.completion_token_ids
        assert later.prompt_token_ids[: len(prefix)] == prefix
        assert later.prompt_source == "bridged", later.prompt_source_reason
        assert later.bridged_from == earlier.request_index


STANDIN = Path(__file__).parents[1] / "vllm_standin.py"


@pytest.fixture(scope="session")
def reply_ids(tiny_model: Path) -> list[int]:
    """What the stand-in always answers: "hi" and the end of the turn."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    return tokenizer.encode("hi", add_special_tokens=False) + [tokenizer.convert_tokens_to_ids("<|im_end|>")]


@contextlib.contextmanager
def standin(reply: list[int], *flags: str) -> Iterator[str]:
    """tests/vllm_standin.py on a free port, reporting no policy version (as vLLM): its base URL."""
    port = free_port()
    process = subprocess.Popen([sys.executable, str(STANDIN), "--port", str(port), "--reply-ids", json.dumps(reply),
                                "--no-version", *flags])
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None and time.monotonic() < deadline, "the vLLM stand-in did not start"
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait()
