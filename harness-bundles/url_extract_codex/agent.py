"""URL extraction with the Codex CLI: `codex exec` fetches the page with its shell tool (`curl -s`)
and answers `ANSWER: <url>`; this wrapper writes Codex's config, runs it, and saves the answer.

Codex runs unmodified. Its config (a fresh CODEX_HOME under $HOME, never the user's ~/.codex) makes
the rollout's OpenAI endpoint a custom provider: `[model_providers.veri]` with base_url =
OPENAI_BASE_URL, env_key = "OPENAI_API_KEY" and wire_api = "responses", the model VERI_POLICY_MODEL.
Hosted web search is off (the policy cannot run it; the proxy would drop it from every prompt), and
Codex's own sandbox is off: the rollout's gVisor sandbox is the isolation, and bubblewrap does not run
inside it.

From the rollout's environment it also reads VERI_TASK_INPUT (the task prompt, JSON) and
VERI_OUTPUT_DIR, where it writes answer.txt (the URL, or empty when there is no answer),
codex-events.jsonl (Codex's `--json` event stream) and codex-last-message.txt. Codex has no turn
limit: VERI_MAX_TURNS is not used (the sandbox's timeout bounds a rollout).

Exit status: 0 when Codex finished, whether the answer is right, wrong or missing (judging it is the
reward's job), also when it stopped on a reply the job's max_tokens cut short. 1 on a real error:
Codex failing to start or ending on an API error (the proxy refused or failed a request).
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
ANSWER = re.compile(r"ANSWER:\s*(\S+)")
CUT_SHORT = "Incomplete response returned"  # Codex's error for a response.incomplete (max_output_tokens)


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


def toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def codex_config(base_url: str, model: str) -> str:
    return "\n".join([
        f"model = {toml_string(model)}",
        'model_provider = "veri"',
        'web_search = "disabled"',
        'approval_policy = "never"',
        'sandbox_mode = "danger-full-access"',
        "",
        "[model_providers.veri]",
        'name = "veri capture proxy"',
        f"base_url = {toml_string(base_url)}",
        'env_key = "OPENAI_API_KEY"',
        'wire_api = "responses"',
        "",
    ])


def main() -> int:
    try:
        prompt = task_prompt(os.environ["VERI_TASK_INPUT"]) + INSTRUCTIONS
        base_url, model = os.environ["OPENAI_BASE_URL"], os.environ.get("VERI_POLICY_MODEL", "policy")
    except (KeyError, ValueError) as error:
        print(f"agent: the rollout environment is incomplete: {error}", file=sys.stderr)
        return 1
    output_dir = Path(os.environ.get("VERI_OUTPUT_DIR", "."))
    output_dir.mkdir(parents=True, exist_ok=True)
    codex_home = Path.home() / ".codex-veri"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(codex_config(base_url, model))
    last_message = output_dir / "codex-last-message.txt"

    command = ["codex", "exec", "--skip-git-repo-check", "--json", "--output-last-message", str(last_message),
               prompt]
    env = {**os.environ, "CODEX_HOME": str(codex_home)}
    with tempfile.TemporaryDirectory(prefix="codex-work-", dir=Path.home()) as workdir:
        try:
            done = subprocess.run(command, cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True)
        except OSError as error:
            print(f"agent: cannot run the Codex CLI: {error}", file=sys.stderr)
            return 1
    (output_dir / "codex-events.jsonl").write_text(done.stdout)
    sys.stderr.write(done.stderr)
    final = last_message.read_text() if last_message.exists() else ""
    if done.returncode != 0:
        reason = failure(done.stdout)
        if CUT_SHORT not in reason:
            print(f"agent: codex exec exited {done.returncode}: {reason}", file=sys.stderr)
            return 1
        # The policy's reply reached the job's max_tokens and Codex stops there (as it does with
        # OpenAI): a finished rollout without an answer, for the reward to judge, not a harness failure.
        print(f"agent: codex stopped on a reply cut at max_tokens ({reason})", file=sys.stderr)
        final = ""
    answer = parse_answer(final)
    if final:
        print(final)
    if answer is None:
        print("agent: no ANSWER: <url> line in the final reply", file=sys.stderr)
    (output_dir / "answer.txt").write_text(f"{answer}\n" if answer else "")
    return 0


def failure(events: str) -> str:
    """The last error Codex reported in its event stream (an API error names the proxy's refusal)."""
    errors = []
    for line in events.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("type") in {"error", "turn.failed"}:
            errors.append(str(event.get("message") or (event.get("error") or {}).get("message") or event))
    return errors[-1] if errors else "no error event (see its stderr above)"


if __name__ == "__main__":
    sys.exit(main())
