"""URL extraction with Claude Code: `claude -p` fetches the page with its Bash tool (`curl -s`) and
answers `ANSWER: <url>`; this wrapper builds the prompt, runs it, and saves the answer.

Claude Code reads ANTHROPIC_BASE_URL / ANTHROPIC_API_KEY itself, as it does anywhere. From the
rollout's environment this wrapper reads VERI_TASK_INPUT (the task prompt, JSON), VERI_MAX_TURNS
(`--max-turns`) and VERI_OUTPUT_DIR, where it writes answer.txt (the URL, or empty when there is no
answer) and claude-result.json (Claude Code's own JSON result: turns, stop reason, usage).

Tools: only `Bash(curl:*)` is allowed (no WebFetch: it may call Anthropic-side services); in `-p`
mode every other tool call is denied, not asked about. Claude Code runs in a fresh empty folder, so
no project files or CLAUDE.md end up in its context.

Exit status: 0 when Claude Code finished, whether the answer is right, wrong or missing (also when
it used up its turns, or stopped on a reply the job's max_tokens cut short: judging that is the
reward's job). 1 on a real error: Claude Code failing to start, crashing, or ending on an API error
(the proxy refused or failed a request).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

INSTRUCTIONS = (
    "\n\nFetch the page with `curl -s <url>` in the shell, find the link, and finish with the exact "
    "URL of that link (its href) on a final line of its own, formatted as:\nANSWER: <url>"
)
ALLOWED_TOOLS = "Bash(curl:*)"
ANSWER = re.compile(r"ANSWER:\s*(\S+)")
# Claude Code's api_error once a reply stopped at max_tokens (stop_reason "max_tokens") and its own
# requests to go on were cut too: the policy's doing, not the API's.
CUT_SHORT = "max_output_tokens"


def parse_answer(text: str | None) -> str | None:
    """The URL after the last `ANSWER:`, without the quotes, brackets or punctuation around it."""
    found = ANSWER.findall(text or "")
    if not found:
        return None
    return found[-1].rstrip(".,;:").strip("<>`'\"*").rstrip(".,;:") or None


def task_prompt(task_input: str) -> str:
    task = json.loads(task_input)
    if isinstance(task, list):  # chat messages: the user turns, in order
        task = "\n\n".join(str(m.get("content", "")) for m in task if isinstance(m, dict) and m.get("role") == "user")
    if not isinstance(task, str) or not task.strip():
        raise ValueError("VERI_TASK_INPUT must be a JSON string or a list of chat messages with a user turn")
    return task


def ending(result: dict) -> str:
    """How Claude Code's run ended: "finished", "out_of_turns", "cut_short" (all for the reward to
    judge) or "failed" (a real error)."""
    if result.get("subtype") == "error_max_turns" or result.get("terminal_reason") == "max_turns":
        return "out_of_turns"
    if result.get("api_error") == CUT_SHORT:
        return "cut_short"
    return "failed" if result.get("is_error") else "finished"


def main() -> int:
    try:
        prompt = task_prompt(os.environ["VERI_TASK_INPUT"]) + INSTRUCTIONS
    except (KeyError, ValueError) as error:
        print(f"agent: no usable task in VERI_TASK_INPUT: {error}", file=sys.stderr)
        return 1
    max_turns = os.environ.get("VERI_MAX_TURNS", "8")
    output_dir = Path(os.environ.get("VERI_OUTPUT_DIR", "."))
    output_dir.mkdir(parents=True, exist_ok=True)

    command = ["claude", "-p", prompt, "--max-turns", max_turns, "--allowedTools", ALLOWED_TOOLS,
               "--output-format", "json"]
    env = {**os.environ, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"}
    with tempfile.TemporaryDirectory(prefix="claude-work-") as workdir:
        try:
            done = subprocess.run(command, cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True)
        except OSError as error:
            print(f"agent: cannot run Claude Code: {error}", file=sys.stderr)
            return 1
    sys.stderr.write(done.stderr)
    try:
        result = json.loads(done.stdout)
    except ValueError:
        print(f"agent: Claude Code exited {done.returncode} without a JSON result:\n{done.stdout[-2000:]}",
              file=sys.stderr)
        return 1
    (output_dir / "claude-result.json").write_text(json.dumps(result, indent=2) + "\n")

    how = ending(result)
    if how == "failed":
        print(f"agent: Claude Code failed ({result.get('terminal_reason') or result.get('subtype')}): "
              f"{result.get('result')}", file=sys.stderr)
        return 1

    # Cut short, `result` is Claude Code's error text, not a reply: a finished rollout without an answer
    # (Claude Code ends so against Anthropic too), so a policy that rambles past max_tokens is scored, not masked.
    final = None if how == "cut_short" else result.get("result")
    answer = parse_answer(final)
    if how == "out_of_turns":
        print(f"agent: Claude Code used up its {max_turns} turns", file=sys.stderr)
    if how == "cut_short":
        print(f"agent: Claude Code stopped on a reply cut at max_tokens ({result.get('result')})", file=sys.stderr)
    if final:
        print(final)
    if answer is None:
        print("agent: no ANSWER: <url> line in the final reply", file=sys.stderr)
    (output_dir / "answer.txt").write_text(f"{answer}\n" if answer else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
