"""The trainer tests' job, which bench/ runs too: a harness bundle (a plain OpenAI-SDK tool loop making two
calls), its tasks and reward, and the script that teacher-forces the tiny model's policy server."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

MAX_TOKENS = 24  # the proxy's per-call cap

SCRIPT = [
    {"if_last_user_turn_contains": "Look up the answer",
     "reply": '<tool_call>\n{"name": "lookup", "arguments": {"key": "answer"}}\n</tool_call>'},
    {"if_last_user_turn_contains": "veri-answer-0", "reply": "alpha"},
    {"if_last_user_turn_contains": "veri-answer-1", "reply": "beta beta"},
    {"if_last_user_turn_contains": "Title this chat", "reply": "Lookup chat"},
]

AGENT = '''
import json, os, pathlib, sys
from openai import OpenAI

task = json.loads(os.environ["VERI_TASK"])
index = int(os.environ["VERI_ROLLOUT_INDEX"])
if task.get("fail_rollout") == index:
    sys.exit("this rollout crashes on purpose")
client = OpenAI(max_retries=task.get("retries", 0))  # a test that restarts the policy server lets it retry
model = os.environ["VERI_POLICY_MODEL"]
tools = [{"type": "function", "function": {"name": "lookup", "description": "Look a key up",
          "parameters": {"type": "object", "properties": {"key": {"type": "string"}}}}}]
messages = [{"role": "user", "content": task["prompt"]}]
reply = client.chat.completions.create(model=model, messages=messages, tools=tools).choices[0].message
messages.append(reply.model_dump(exclude_none=True))
for call in reply.tool_calls or []:
    messages.append({"role": "tool", "tool_call_id": call.id, "content": f"veri-answer-{index % 2}"})
if task.get("side_call"):  # a title for the chat, as Claude Code makes one: another system prompt, a new root
    client.chat.completions.create(model=model, messages=[
        {"role": "system", "content": "You write short titles."}, {"role": "user", "content": "Title this chat"}])
hold = task.get("hold")  # a straggler: the first rollout to get here waits for a later policy version
if hold and index == 0 and not pathlib.Path(hold["marker"]).exists():
    pathlib.Path(hold["marker"]).write_text("held")
    import time, urllib.request
    give_up = time.monotonic() + hold.get("seconds", 1e9)  # or until then: a straggler, not a deadlock
    while json.load(urllib.request.urlopen(hold["policy_url"] + "/policy_version"))["policy_version"] < hold["until"]:
        if time.monotonic() > give_up:
            break
        time.sleep(0.2)
restart = task.get("restart")  # the test restarts the policy server while rollout 0 waits, on its n-th run
if restart and index == 0:
    runs = pathlib.Path(restart["runs"])
    runs.write_text((runs.read_text() if runs.exists() else "") + "x")
    if len(runs.read_text()) == restart["on_run"]:
        pathlib.Path(restart["ready"]).write_text("ready")
        import time
        while not pathlib.Path(restart["done"]).exists():
            time.sleep(0.2)
answer = client.chat.completions.create(model=model, messages=messages, tools=tools).choices[0].message.content
pathlib.Path(os.environ["VERI_OUTPUT_DIR"], "answer.txt").write_text(answer or "")
print("answer:", answer)
'''

REWARD = '''
def reward(prompts, completions, outputs, expected, **kwargs):
    answer = (outputs[0] / "answer.txt").read_text()
    return [1.0 if expected[0] in answer else 0.0]
'''


def write_bundle(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "veri-harness.toml").write_text('name = "lookup"\nentrypoint = ["python", "agent.py"]\n')
    (folder / "agent.py").write_text(AGENT)
    return folder


def write_tasks(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def write_job(folder: Path, model: Path, **overrides) -> Path:
    """A CPU job over the bundle: 2 tasks x 2 rollouts per step (task 1's second rollout crashes)."""
    folder.mkdir(parents=True, exist_ok=True)
    write_bundle(folder / "bundle")
    write_tasks(folder / "tasks.jsonl", [
        {"prompt": "Look up the answer, please.", "expected": "beta"},
        {"prompt": "Look up the answer now.", "expected": "beta", "fail_rollout": 1},
    ])
    (folder / "reward.py").write_text(REWARD)
    config = {
        "model": str(model), "backend": "hf", "dataset": {"path": "tasks.jsonl"}, "harness_bundle": "bundle",
        "rewards": [{"file": "reward.py"}], "rollouts_per_prompt": 2, "max_response_length": 64,
        "sampling": {"max_tokens": MAX_TOKENS}, "learning_rate": 1e-4, "max_steps": 3, "harness_timeout_s": 60,
        "grpo": {"per_device_train_batch_size": 4},
        **overrides,
    }
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(config))
    return path
