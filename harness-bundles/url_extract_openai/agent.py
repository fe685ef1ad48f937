"""URL-extraction agent: an ordinary OpenAI-SDK tool loop with one tool, `fetch_url`.

Nothing in it knows about veri. It reads what any OpenAI-SDK program reads (OPENAI_BASE_URL and
OPENAI_API_KEY, via `OpenAI()`), plus the task and hints from the rollout's environment:
VERI_TASK_INPUT (the task prompt, JSON: a string or a list of chat messages), VERI_POLICY_MODEL,
VERI_MAX_TURNS (the most model calls it makes) and VERI_OUTPUT_DIR (where answer.txt goes).

The model fetches the page named in the task and replies `ANSWER: <url>`. The agent prints that
final reply and writes the URL (or nothing, when there is no answer) to $VERI_OUTPUT_DIR/answer.txt.

Exit status: 0 when the loop finished, whether the answer is right, wrong or missing (a reply
without ANSWER, or VERI_MAX_TURNS model calls used up) — judging it is the reward's job. 1 on a
real error: the model API unreachable or answering with an error, or an unreadable task. A page
that fails to load is not an error: the model sees the failure as the tool's result.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import httpx
import openai
from openai import OpenAI

SYSTEM_PROMPT = (
    "You answer questions about web pages. Use the fetch_url tool to read the page the user names, "
    "find the link they ask about, and reply with the exact URL of that link (its href) on a final "
    "line of its own, formatted as:\nANSWER: <url>"
)
FETCH_URL_TOOL = {
    "type": "function",
    "function": {
        "name": "fetch_url",
        "description": "Fetch a web page over HTTP(S) and return its HTML (the first 8000 characters).",
        "parameters": {
            "type": "object",
            "properties": {"url": {"type": "string", "description": "the absolute http(s) URL to fetch"}},
            "required": ["url"],
        },
    },
}
MAX_PAGE_CHARS = 8000
ANSWER = re.compile(r"ANSWER:\s*(\S+)")


def fetch_url(url: str) -> str:
    if not url.startswith(("http://", "https://")):
        return f"error: not an http(s) URL: {url!r}"
    try:
        response = httpx.get(url, timeout=20.0, follow_redirects=True)
    except httpx.HTTPError as error:
        return f"error: could not fetch {url}: {error}"
    text = response.text
    if len(text) > MAX_PAGE_CHARS:
        text = text[:MAX_PAGE_CHARS] + "\n[... truncated]"
    return f"HTTP {response.status_code}\n\n{text}"


def run_tool(name: str, arguments: str) -> str:
    if name != "fetch_url":
        return f"error: unknown tool {name!r}; the only tool is fetch_url"
    try:
        url = json.loads(arguments)["url"]
    except (ValueError, KeyError, TypeError):
        return 'error: arguments must be a JSON object like {"url": "https://..."}'
    return fetch_url(str(url))


def parse_answer(text: str | None) -> str | None:
    """The URL after the last `ANSWER:`, without the quotes, brackets or punctuation around it."""
    found = ANSWER.findall(text or "")
    if not found:
        return None
    return found[-1].rstrip(".,;:").strip("<>`'\"*").rstrip(".,;:") or None


def initial_messages(task_input: str) -> list[dict]:
    task = json.loads(task_input)
    if isinstance(task, str):
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": task}]
    if isinstance(task, list) and all(isinstance(m, dict) and "role" in m for m in task):
        return [{"role": "system", "content": SYSTEM_PROMPT}, *task]
    raise ValueError("VERI_TASK_INPUT must be a JSON string or a list of chat messages")


def run(client: OpenAI, model: str, messages: list[dict], max_turns: int) -> str | None:
    """The tool loop; returns the model's final reply (None when max_turns ran out first)."""
    for _ in range(max_turns):
        completion = client.chat.completions.create(model=model, messages=messages, tools=[FETCH_URL_TOOL])
        message = completion.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return message.content or ""
        for call in message.tool_calls:
            result = run_tool(call.function.name, call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return None


def main() -> int:
    try:
        messages = initial_messages(os.environ["VERI_TASK_INPUT"])
    except (KeyError, ValueError) as error:
        print(f"agent: no usable task in VERI_TASK_INPUT: {error}", file=sys.stderr)
        return 1
    model = os.environ.get("VERI_POLICY_MODEL", "policy")
    max_turns = int(os.environ.get("VERI_MAX_TURNS", "8"))
    output_dir = Path(os.environ.get("VERI_OUTPUT_DIR", "."))

    client = OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY from the environment
    try:
        final = run(client, model, messages, max_turns)
    except openai.APIError as error:
        print(f"agent: model API error: {error}", file=sys.stderr)
        return 1

    answer = parse_answer(final)
    if final is None:
        print(f"agent: no final reply within {max_turns} model calls", file=sys.stderr)
    else:
        print(final)
    if answer is None:
        print("agent: no ANSWER: <url> line in the final reply", file=sys.stderr)
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "answer.txt").write_text(f"{answer}\n" if answer else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
