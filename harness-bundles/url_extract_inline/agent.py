"""URL-extraction agent, easy variant (the CPU demo): one OpenAI-SDK chat call, no tools.

The task prompt already lists the page's links (`veri data url-extract --inline`); the model is asked
for the URL of one of them. Nothing in it knows about veri: it reads OPENAI_BASE_URL and
OPENAI_API_KEY (via `OpenAI()`), the task from VERI_TASK_INPUT (JSON: a string or a list of chat
messages), VERI_POLICY_MODEL, and writes the first URL of the reply to $VERI_OUTPUT_DIR/answer.txt
(empty when there is none). Exit 0 whatever the answer (judging it is the reward's job); 1 when the
model API fails or the task is unreadable.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import openai
from openai import OpenAI

SYSTEM_PROMPT = ("You answer questions about web pages. Reply with the exact URL of the link the user "
                 "asks about, and nothing else.")
URL = re.compile(r"https?://[^\s<>\"'`)\]]+")


def messages_for(task_input: str) -> list[dict]:
    task = json.loads(task_input)
    if isinstance(task, str):
        task = [{"role": "user", "content": task}]
    if not (isinstance(task, list) and all(isinstance(m, dict) and "role" in m for m in task)):
        raise ValueError("VERI_TASK_INPUT must be a JSON string or a list of chat messages")
    return [{"role": "system", "content": SYSTEM_PROMPT}, *task]


def first_url(text: str) -> str | None:
    found = URL.search(text)
    return found.group(0).rstrip(".,;:") if found else None


def main() -> int:
    try:
        messages = messages_for(os.environ["VERI_TASK_INPUT"])
    except (KeyError, ValueError) as error:
        print(f"agent: no usable task in VERI_TASK_INPUT: {error}", file=sys.stderr)
        return 1
    try:
        completion = OpenAI().chat.completions.create(
            model=os.environ.get("VERI_POLICY_MODEL", "policy"), messages=messages)
    except openai.APIError as error:
        print(f"agent: model API error: {error}", file=sys.stderr)
        return 1
    reply = completion.choices[0].message.content or ""
    print(reply)
    answer = first_url(reply)
    output_dir = Path(os.environ.get("VERI_OUTPUT_DIR", "."))
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "answer.txt").write_text(f"{answer}\n" if answer else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
