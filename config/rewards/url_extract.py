"""Reward for the URL-extraction demo: 1.0 when the agent's final answer names the expected URL.

TRL-style: one value per completion. `expected_url` is a dataset column; `outputs` (the harness's
VERI_OUTPUT_DIR) is read too, so a harness may write its answer to answer.txt instead of saying it.
"""

from __future__ import annotations

import re
from pathlib import Path

URL = re.compile(r"https?://[^\s<>\"')\]]+")


def _normalise(url: str) -> str:
    return url.strip().rstrip("/.,;").lower()


def _final_text(completion) -> str:
    if isinstance(completion, str):
        return completion
    return "\n".join(str(message.get("content") or "") for message in completion)


def reward(prompts, completions, expected_url, outputs=None, **kwargs):
    outputs = outputs or [None] * len(completions)
    scores = []
    for completion, expected, folder in zip(completions, expected_url, outputs, strict=True):
        text = _final_text(completion)
        answer = Path(folder) / "answer.txt" if folder else None
        if answer is not None and answer.is_file():
            text += "\n" + answer.read_text(errors="replace")
        found = {_normalise(url) for url in URL.findall(text)}
        scores.append(1.0 if _normalise(expected) in found else 0.0)
    return scores
