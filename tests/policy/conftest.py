"""Fixtures for the hf policy server tests: an HTTP client on the shared server and a reference model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from testkit.servers import RunningServer


@pytest.fixture(scope="session")
def reference_model(tiny_model: Path) -> PreTrainedModel:
    """The same weights the server loads, in this process, for full-forward checks."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype="float32")
    return model.eval()


@pytest.fixture(scope="session")
def tokenizer(tiny_model: Path) -> PreTrainedTokenizerBase:
    return AutoTokenizer.from_pretrained(tiny_model)


@pytest.fixture(scope="session")
def prompts(tokenizer: PreTrainedTokenizerBase) -> list[list[int]]:
    """Token-id prompts of clearly different lengths."""
    texts = [
        "Hi",
        "Extract every URL from the page below.",
        "<html><body><a href='https://example.com/docs'>docs</a> and some text about the weather</body></html>",
        "The quick brown fox jumps over the lazy dog. " * 6,
    ]
    return [tokenizer(text).input_ids for text in texts]


@pytest.fixture
def client(policy_server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=policy_server.url, timeout=120) as c:
        yield c
