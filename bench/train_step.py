"""Per-step time split of `veri train` on CPU: tiny model, 8 rollouts of a 2-turn harness per step
(2 tasks x 4 rollouts, local sandboxes, real policy server + capture proxy, TRL GRPO steps).

Prints, averaged over the steps after the first (warm-up): rollout / reward / train / weight sync
seconds, the policy server's generation time (its forward passes, from /stats), and the
orchestration share: everything that is neither generation nor the training step. Target ≤ 25 %.

Two harnesses, same 2-turn tool loop, same calls: `sdk` (the OpenAI SDK: what users write; its
Python start-up and `import openai` alone cost ~0.5 s of CPU per rollout) and `stdlib` (urllib:
starts in ~30 ms, so what remains is veri's own orchestration). Both are printed; with the tiny model
a step's generation and optimizer work are well under a second each, so the harness's start-up
decides the `sdk` share on a 2-core machine.

    python bench/train_step.py --model build/models/tiny [--harness sdk|stdlib|both]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from testkit.servers import start_server
from testkit.trainer_jobs import MAX_TOKENS, SCRIPT, write_job
from veri.archive import read_metrics

# The same loop as tests/trainer/conftest.py's AGENT, on urllib: two chat calls, one tool result.
STDLIB_AGENT = '''
import json, os, pathlib, sys, urllib.request

task = json.loads(os.environ["VERI_TASK"])
index = int(os.environ["VERI_ROLLOUT_INDEX"])
if task.get("fail_rollout") == index:
    sys.exit("this rollout crashes on purpose")
url = os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions"
headers = {"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"}
tools = [{"type": "function", "function": {"name": "lookup", "description": "Look a key up",
          "parameters": {"type": "object", "properties": {"key": {"type": "string"}}}}}]

def chat(messages):
    body = json.dumps({"model": os.environ["VERI_POLICY_MODEL"], "messages": messages, "tools": tools}).encode()
    with urllib.request.urlopen(urllib.request.Request(url, body, headers)) as reply:
        return json.load(reply)["choices"][0]["message"]

messages = [{"role": "user", "content": task["prompt"]}]
reply = chat(messages)
messages.append({k: v for k, v in reply.items() if v is not None})
for call in reply.get("tool_calls") or []:
    messages.append({"role": "tool", "tool_call_id": call["id"], "content": f"veri-answer-{index % 2}"})
answer = chat(messages).get("content")
pathlib.Path(os.environ["VERI_OUTPUT_DIR"], "answer.txt").write_text(answer or "")
print("answer:", answer)
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path("build/models/tiny"))
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--harness", choices=["sdk", "stdlib", "both"], default="both")
    args = parser.parse_args()
    for harness in (["stdlib", "sdk"] if args.harness == "both" else [args.harness]):
        print(f"== harness: {harness}")
        measure(args.model.resolve(), args.steps, harness)


def measure(model: Path, steps: int, harness: str) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        script = root / "script.json"
        script.write_text(json.dumps(SCRIPT))
        job = write_job(root / "job", model, rollouts_per_prompt=4, max_steps=steps,
                        grpo={"per_device_train_batch_size": 8})
        if harness == "stdlib":
            (job.parent / "bundle" / "agent.py").write_text(STDLIB_AGENT)
        policy_args = ["serve", "policy", "--model", str(model), "--scripted-replies", str(script)]
        with start_server(policy_args) as policy, start_server(
            ["serve", "proxy", "--policy-url", policy.url, "--model", str(model), "--store", str(root / "spans"),
             "--max-tokens", str(MAX_TOKENS)]
        ) as proxy:
            generation_before = httpx.get(f"{policy.url}/stats").json()["generation_s"]
            done = subprocess.run(
                [sys.executable, "-m", "veri.cli", "train", str(job), "--sandbox", "local", "--proxy-url", proxy.url,
                 "--policy-url", policy.url, "--output", str(root / "jobs"), "--base-dir", str(job.parent)],
                capture_output=True, text=True, timeout=1800)
            if done.returncode != 0:
                sys.exit(f"veri train failed:\n{done.stderr[-4000:]}")
            generation = httpx.get(f"{policy.url}/stats").json()["generation_s"] - generation_before
        metrics = read_metrics(root / "jobs" / "job" / "metrics.jsonl")
    measured = metrics[1:] or metrics
    mean = {key: sum(m.get(key, 0.0) for m in measured) / len(measured)
            for key in ("time/rollout_s", "time/reward_s", "time/train_s", "time/weight_sync_s", "time/step_s")}
    generation_per_step = generation / len(metrics)  # the server's forward passes, spread over all steps
    step = mean["time/step_s"]
    orchestration = step - generation_per_step - mean["time/train_s"]
    print(f"steps measured: {len(measured)} (of {len(metrics)}; the first is warm-up), "
          f"{metrics[-1]['rollouts']} rollouts per step")
    for key, value in mean.items():
        print(f"  {key:<20} {value:7.2f} s")
    print(f"  {'generation (policy)':<20} {generation_per_step:7.2f} s")
    print(f"orchestration share: {orchestration / step:6.1%}  (step {step:.2f} s - generation "
          f"{generation_per_step:.2f} s - train {mean['time/train_s']:.2f} s; target <= 25 %)")


if __name__ == "__main__":
    main()
