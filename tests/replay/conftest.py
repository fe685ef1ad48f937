"""Replay fixtures: the checked-in recordings (tests/replay/recordings/, made by record_demos.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from veri.services.proxy.app import create_app
from veri.services.proxy.settings import ProxySettings
from veri.tools.replay import policy
from veri.tools.replay.recording import Recording
from veri.tools.replay.runner import serve_in_thread

RECORDINGS = Path(__file__).resolve().parent / "recordings"
# Every demo bundle's traffic, the SDKs' own loops, Claude Code starting a sub-agent, a
# compacting harness.
EXPECTED = ["anthropic_compaction", "anthropic_sdk", "claude_sub_agent", "openai_responses", "url_extract_claude",
            "url_extract_codex", "url_extract_openai"]


@pytest.fixture
def anthropic_recording() -> Recording:
    return Recording.load(RECORDINGS / "anthropic_sdk.jsonl")


@contextlib.contextmanager
def replaying_proxy(recording: Recording, model: Path, store: Path, **settings: Any) -> Iterator[str]:
    """veri's proxy app on uvicorn whose policy is `veri replay policy`'s app serving `recording`: its URL."""
    with serve_in_thread(policy.create_app(recording), "replay policy") as policy_url:
        proxy_settings = ProxySettings(policy_url=policy_url, model_dir=model, store_dir=store,
                                       renderer=recording.capture.renderer, max_tokens=recording.capture.max_tokens,
                                       **settings)
        with serve_in_thread(create_app(proxy_settings), "proxy") as proxy_url:
            yield proxy_url
