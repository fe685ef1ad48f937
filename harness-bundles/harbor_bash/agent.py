"""A shell agent for Harbor tasks: an ordinary OpenAI-SDK loop with one tool, `bash`, run where the agent
runs — inside the task's environment, from its working directory.

Nothing in it knows about veri. It reads what any OpenAI-SDK program reads (OPENAI_BASE_URL and
OPENAI_API_KEY, via `OpenAI()`), plus VERI_TASK_INPUT (the task's instruction, JSON: a string or a list of
chat messages), VERI_POLICY_MODEL and VERI_MAX_TURNS (the most model calls it makes).

Each reply's commands run in order: the `bash` tool calls, or — for models whose chat template has no
tools, like SmolLM2 — the reply's first ```bash block. Each command's output goes back to the model; the
loop ends when a reply runs nothing, or after VERI_MAX_TURNS calls. Whether the task was done is the
task's hidden tests' to say, after the agent exits.

Exit status: 0 when the loop finished, 1 on a real error (the model API unreachable or answering with
an error, or an unreadable task). A failing command is not an error: the model sees its output.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import openai
from openai import OpenAI

SYSTEM_PROMPT = (
    "You are a shell agent on a Linux machine. Do the user's task by replying with one bash command in a "
    "```bash code block."
)
# Worked examples as earlier turns: a small model follows a shown format far better than a described one.
EXAMPLES = [
    ("Create the file /app/note.txt containing exactly the word `cat`.", "echo cat > /app/note.txt"),
    ("Write the last line of /app/list.txt to /app/last.txt.", "tail -n 1 /app/list.txt > /app/last.txt"),
    ("Count the words of /app/text.txt and write the number to /app/count.txt.",
     "wc -w < /app/text.txt > /app/count.txt"),
]
BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a bash command in the task's machine and return its output (stdout and stderr).",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "the bash command to run"}},
            "required": ["command"],
        },
    },
}
COMMAND_TIMEOUT_S = 30
MAX_OUTPUT_CHARS = 4000
FENCED = re.compile(r"```(?:bash|sh|shell|console)?[ \t]*\n(.*?)(?:```|$)", re.DOTALL)


def fenced_command(text: str | None) -> str | None:
    """The first fenced code block of a reply (an unclosed one runs to the end: replies get cut)."""
    found = FENCED.search(text or "")
    command = found[1].strip() if found else ""
    return command or None


def run_bash(command: str) -> str:
    try:
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"(the command ran past {COMMAND_TIMEOUT_S} s and was stopped)"
    output = (done.stdout + done.stderr)[-MAX_OUTPUT_CHARS:]
    return f"{output}(exit status {done.returncode})"


def initial_messages(task_input: str) -> list[dict]:
    task = json.loads(task_input)
    shown = [{"role": "system", "content": SYSTEM_PROMPT}]
    for question, command in EXAMPLES:
        shown += [{"role": "user", "content": question}, {"role": "assistant", "content": f"```bash\n{command}\n```"}]
    if isinstance(task, str):
        return [*shown, {"role": "user", "content": task}]
    if isinstance(task, list) and all(isinstance(m, dict) and "role" in m for m in task):
        return [*shown, *task]
    raise ValueError("VERI_TASK_INPUT must be a JSON string or a list of chat messages")


def step(client: OpenAI, model: str, messages: list[dict]) -> bool:
    """One model call and the commands it asks for; False when it asked for none (the agent is done)."""
    completion = client.chat.completions.create(model=model, messages=messages, tools=[BASH_TOOL])
    message = completion.choices[0].message
    messages.append(message.model_dump(exclude_none=True))
    if message.tool_calls:
        for call in message.tool_calls:
            try:
                command = str(json.loads(call.function.arguments)["command"])
            except (ValueError, KeyError, TypeError):
                result = 'error: arguments must be a JSON object like {"command": "ls"}'
            else:
                print(f"$ {command}")
                result = run_bash(command) if call.function.name == "bash" else f"error: no tool {call.function.name!r}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        return True
    command = fenced_command(message.content)
    if command is None:
        return False
    print(f"$ {command}")
    messages.append({"role": "user", "content": f"Output:\n{run_bash(command)}"})
    return True


def main() -> int:
    try:
        messages = initial_messages(os.environ["VERI_TASK_INPUT"])
    except (KeyError, ValueError) as error:
        print(f"agent: no usable task in VERI_TASK_INPUT: {error}", file=sys.stderr)
        return 1
    model = os.environ.get("VERI_POLICY_MODEL", "policy")
    max_turns = int(os.environ.get("VERI_MAX_TURNS", "4"))
    client = OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY from the environment
    try:
        for _ in range(max_turns):
            if not step(client, model, messages):
                break
    except openai.APIError as error:
        print(f"agent: model API error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
