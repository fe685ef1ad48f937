"""Rewards for the URL-extraction demo (both variants). TRL-style: one value per completion.

The agent's answer is what it wrote to answer.txt in its VERI_OUTPUT_DIR (`outputs`) when that is not
empty; else, in its final reply, the URL after the last `ANSWER:`, else the first URL. Only that one
URL counts: a reply that lists every link on the page does not get credit for the right one.

  reward      1.0 when the answer is the expected URL (`expected_url`, a dataset column), else 0.0
  closeness   partial credit for the small-model demo: how much of the expected URL the answer
              reproduces (difflib ratio, 0..1; 0.0 without an answer). A 135M model often copies a
              URL with a character or path segment changed; this rewards getting closer.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

URL = re.compile(r"https?://[^\s<>\"'`)\]]+")
ANSWER = re.compile(r"ANSWER:\s*(\S+)")


def _normalise(url: str) -> str:
    return url.strip().strip("<>`'\"*").rstrip("/.,;:").lower()


def _final_text(completion) -> str:
    if isinstance(completion, str):
        return completion
    return "\n".join(str(message.get("content") or "") for message in completion)


def answer_of(completion, folder) -> str | None:
    """The one URL the agent answered with (normalised), or None."""
    path = Path(folder) / "answer.txt" if folder else None
    if path is not None and path.is_file():
        written = path.read_text(errors="replace").strip()
        if written:
            return _normalise(written.split()[0])
    text = _final_text(completion)
    tagged = ANSWER.findall(text)
    if tagged:
        return _normalise(tagged[-1])
    found = URL.search(text)
    return _normalise(found.group(0)) if found else None


def reward(prompts, completions, expected_url, outputs=None, **kwargs):
    outputs = outputs or [None] * len(completions)
    return [1.0 if answer_of(completion, folder) == _normalise(expected) else 0.0
            for completion, expected, folder in zip(completions, expected_url, outputs, strict=True)]


def closeness(prompts, completions, expected_url, outputs=None, **kwargs):
    outputs = outputs or [None] * len(completions)
    scores = []
    for completion, expected, folder in zip(completions, expected_url, outputs, strict=True):
        answer = answer_of(completion, folder)
        scores.append(0.0 if answer is None else
                      round(difflib.SequenceMatcher(None, answer, _normalise(expected)).ratio(), 4))
    return scores
