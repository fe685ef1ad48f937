"""Harbor tasks with Claude Code: `claude -p` does the task with its own tools, where the agent runs —
inside the task's environment, from its working directory, so its commands and edits act on the task's
files. This wrapper only runs it and keeps its result.

Claude Code reads ANTHROPIC_BASE_URL / ANTHROPIC_API_KEY itself, as it does anywhere. From the
rollout's environment this wrapper reads VERI_TASK_INPUT (the task's instruction, JSON: a string or a
list of chat messages), VERI_MAX_TURNS (`--max-turns`) and VERI_OUTPUT_DIR, where it writes
claude-result.json (Claude Code's own JSON result: turns, stop reason, usage). It writes no answer:
whether the task was done is the task's hidden tests' to say, after the agent exits.

Tools: Claude Code's working ones (ALLOWED_TOOLS: the shell, file reads and edits, sub-agents); in `-p`
mode any other call is denied, not asked about (no WebFetch or WebSearch: they may call Anthropic-side
services). Not --dangerously-skip-permissions: in a task's sandbox Claude Code may run as root, and
refuses that flag there; the allowed list is what lets its tools run.

Exit status: 0 when Claude Code finished (also when it used up its turns, or stopped on a reply the job's
max_tokens cut short: judging the work is the tests' job). 1 on a real error: Claude Code failing to
start, ending without a JSON result, or ending on an API error (the proxy refused or failed a request).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# ToolSearch loads the deferred ones (NotebookEdit, TodoWrite, the background shell's TaskOutput and TaskStop).
ALLOWED_TOOLS = "Bash Edit Write Read Glob Grep NotebookEdit TodoWrite Agent TaskOutput TaskStop ToolSearch"
# Claude Code's api_error once a reply stopped at max_tokens (stop_reason "max_tokens") and its own
# requests to go on were cut too: the policy's doing, not the API's.
CUT_SHORT = "max_output_tokens"


def task_prompt(task_input: str) -> str:
    task = json.loads(task_input)
    if isinstance(task, list):  # chat messages: the user turns, in order
        task = "\n\n".join(str(m.get("content", "")) for m in task if isinstance(m, dict) and m.get("role") == "user")
    if not isinstance(task, str) or not task.strip():
        raise ValueError("VERI_TASK_INPUT must be a JSON string or a list of chat messages with a user turn")
    return task


def ending(result: dict) -> str:
    """How Claude Code's run ended: "finished", "out_of_turns", "cut_short" (all for the tests to
    judge) or "failed" (a real error)."""
    if result.get("subtype") == "error_max_turns" or result.get("terminal_reason") == "max_turns":
        return "out_of_turns"
    if result.get("api_error") == CUT_SHORT:
        return "cut_short"
    return "failed" if result.get("is_error") else "finished"


def main() -> int:
    try:
        prompt = task_prompt(os.environ["VERI_TASK_INPUT"])
    except (KeyError, ValueError) as error:
        print(f"agent: no usable task in VERI_TASK_INPUT: {error}", file=sys.stderr)
        return 1
    max_turns = os.environ.get("VERI_MAX_TURNS", "16")
    output_dir = Path(os.environ.get("VERI_OUTPUT_DIR", "."))
    output_dir.mkdir(parents=True, exist_ok=True)

    # The prompt right after -p: --allowedTools takes every word after it up to the next option.
    command = ["claude", "-p", prompt, "--max-turns", max_turns, "--allowedTools", ALLOWED_TOOLS,
               "--output-format", "json"]
    env = {**os.environ, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"}
    try:  # in this process's working directory: the task's
        done = subprocess.run(command, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
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
    if not isinstance(result, dict):
        print(f"agent: Claude Code exited {done.returncode} with an unexpected result: {done.stdout[-2000:]}",
              file=sys.stderr)
        return 1
    (output_dir / "claude-result.json").write_text(json.dumps(result, indent=2) + "\n")

    how = ending(result)
    if how == "failed":
        print(f"agent: Claude Code failed ({result.get('terminal_reason') or result.get('subtype')}): "
              f"{result.get('result')}", file=sys.stderr)
        return 1
    if how == "out_of_turns":
        print(f"agent: Claude Code used up its {max_turns} turns", file=sys.stderr)
    elif how == "cut_short":
        print(f"agent: Claude Code stopped on a reply cut at max_tokens ({result.get('result')})", file=sys.stderr)
    elif result.get("result"):
        print(result["result"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
