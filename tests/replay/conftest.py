"""Replay fixtures: the checked-in recordings (tests/replay/recordings/, made by record_demos.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from veri.replay.recording import Recording

RECORDINGS = Path(__file__).resolve().parent / "recordings"
# Every demo bundle's traffic and the SDKs' own loops; the Codex bundle's joins once it lands (README.md).
EXPECTED = ["anthropic_sdk", "openai_responses", "url_extract_claude", "url_extract_openai"]


@pytest.fixture
def anthropic_recording() -> Recording:
    return Recording.load(RECORDINGS / "anthropic_sdk.jsonl")
