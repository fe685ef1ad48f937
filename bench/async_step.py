"""Asynchronous training against the synchronous loop: the same job at max_staleness 0 and 1, on CPU.

Tiny model, local sandboxes, a real hf policy server + capture proxy, TRL GRPO steps (as
bench/train_step.py). The policy's first reply is scripted (a tool call), its answer is sampled, and
the reward is config/rewards/tiny_proof.py's (the answer's variety: it differs inside a group, so the
steps move the weights and the rewards of the runs can be compared). The harness is the 2-turn tool
loop whose tool takes a heavy-tailed time:
lognormal with median `--tool-median-s` and sigma 0.99 (p99 ~ 10x p50), seeded per rollout, so a
step's slowest rollout sets the synchronous pace.

An instrument, not an anecdote: `--rounds` rounds (3) of `--steps` steps (20) per arm, the arms
interleaved within each round (0, 1, 0, 1, ...), so the box's other load falls on both. Per run: the
mean step time (the steps after the first), the staleness max, the mean reward, the policy's busy
fraction (its forward-pass seconds, from the server's /stats, over the steps' seconds) and the rollouts
dropped as stale. Per round: its async/sync ratio; then their median and min-max, the dropped
fraction per arm, the targets (bench/async_figures.py) met or missed with the reward difference per
round, and the load average before and after. Last line (the median ratio; the other figures pooled
over the rounds):

    async/sync step time: R (max_staleness 1; staleness max S; reward sync A async B; policy busy P0 -> P1;
    dropped D%)

    python bench/async_step.py [--model build/models/tiny] [--steps 20] [--rounds 3] [--arms 0 1 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.async_figures import comparison_line, dropped_fraction, job_figures, pool, round_ratios, spread, verdict
from testkit.servers import start_server
from testkit.trainer_jobs import MAX_TOKENS, SCRIPT, write_job
from veri.archive import read_metrics

REPO = Path(__file__).resolve().parents[1]

# tests/trainer/conftest.py's loop on urllib (fast start-up), with a slow, heavy-tailed tool.
AGENT = '''
import hashlib, json, os, pathlib, random, time, urllib.request

task = json.loads(os.environ["VERI_TASK"])
index = int(os.environ["VERI_ROLLOUT_INDEX"])
seed = int(hashlib.sha256(os.environ["VERI_ROLLOUT_ID"].encode()).hexdigest()[:8], 16)
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
time.sleep(random.Random(seed).lognormvariate(0.0, 0.99) * task["tool_median_s"])
for call in reply.get("tool_calls") or []:
    messages.append({"role": "tool", "tool_call_id": call["id"], "content": f"veri-answer-{index % 2}"})
answer = chat(messages).get("content")
pathlib.Path(os.environ["VERI_OUTPUT_DIR"], "answer.txt").write_text(answer or "")
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path("build/models/tiny"))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--arms", type=int, nargs="+", default=[0, 1], help="max_staleness values (0 and 1 at least)")
    parser.add_argument("--tool-median-s", type=float, default=0.4)
    args = parser.parse_args()
    if not {0, 1} <= set(args.arms) or args.steps < 2:
        parser.error("--arms needs 0 and 1 (the comparison), --steps at least 2 (the first step is not measured)")
    model = args.model.resolve()
    runs: dict[int, list[dict[str, float]]] = {k: [] for k in sorted(set(args.arms))}
    began, load_before = time.monotonic(), os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        script = root / "script.json"
        script.write_text(json.dumps(SCRIPT[:1]))  # the tool call; the answer is the model's own
        policy_args = ["serve", "policy", "--model", str(model), "--scripted-replies", str(script)]
        with start_server(policy_args) as policy, start_server(
            ["serve", "proxy", "--policy-url", policy.url, "--model", str(model), "--store", str(root / "spans"),
             "--max-tokens", str(MAX_TOKENS)]
        ) as proxy:
            for round_ in range(args.rounds):
                for staleness in runs:
                    figures = run(root / f"r{round_}-k{staleness}", model, policy.url, proxy.url, staleness,
                                  args.steps, args.tool_median_s)
                    runs[staleness].append(figures)
                    print(f"round {round_ + 1}, max_staleness {staleness}: step {figures['step_s']:.2f} s, staleness"
                          f" max {figures['staleness_max']:.0f}, reward {figures['reward']:.3f}, policy busy"
                          f" {figures['policy_busy']:.0%}, dropped {figures['dropped']:.0f} of"
                          f" {figures['rollouts']:.0f} rollouts", flush=True)
                ratios = {k: runs[k][-1]["step_s"] / runs[0][-1]["step_s"] for k in runs if k}
                print(f"round {round_ + 1}: async/sync step time "
                      + ", ".join(f"{ratio:.2f} (max_staleness {k})" for k, ratio in ratios.items()), flush=True)
    # the box's other load (shared cores) moves single rounds: say how busy it was
    print(f"{args.rounds} round(s) of {args.steps} steps per arm in {(time.monotonic() - began) / 60:.1f} min;"
          f" load average {load_before:.1f} before it began (the box's other work),"
          f" {os.getloadavg()[0]:.1f} at the end (its own included)")
    for k in runs:
        if k:
            print(f"max_staleness {k}: " + spread(round_ratios(runs[k], runs[0])))
    pooled = {k: pool(figures) for k, figures in runs.items()}
    print("dropped as stale: " + ", ".join(f"max_staleness {k} {dropped_fraction(pooled[k]):.1%}"
                                           f" ({pooled[k]['dropped']:.0f} of {pooled[k]['rollouts']:.0f})"
                                           for k in runs))
    ratios_1 = round_ratios(runs[1], runs[0])
    print(verdict(ratios_1, dropped_fraction(pooled[1])) + "; reward async - sync per round "
          + ", ".join(f"{one['reward'] - zero['reward']:+.3f}" for one, zero in zip(runs[1], runs[0], strict=True)))
    print(comparison_line(pooled[0], pooled[1], ratio=statistics.median(ratios_1)))


def run(folder: Path, model: Path, policy_url: str, proxy_url: str, staleness: int, steps: int,
        tool_median_s: float) -> dict[str, float]:
    job = write_job(folder, model, rollouts_per_prompt=4, max_steps=steps, max_staleness=staleness,
                    max_parallel_rollouts=16, grpo={"per_device_train_batch_size": 8}, learning_rate=1e-3,
                    rewards=[{"file": str(REPO / "config/rewards/tiny_proof.py")}])
    (job.parent / "bundle" / "agent.py").write_text(AGENT)
    # The tool's median rides in the task row: a sandbox sees the harness contract's variables only.
    tasks = [json.loads(line) for line in (job.parent / "tasks.jsonl").read_text().splitlines()]
    (job.parent / "tasks.jsonl").write_text("".join(
        json.dumps({**{k: v for k, v in row.items() if k != "fail_rollout"}, "tool_median_s": tool_median_s}) + "\n"
        for row in tasks))
    generation_before = httpx.get(f"{policy_url}/stats").json()["generation_s"]
    done = subprocess.run(
        [sys.executable, "-m", "veri.cli", "train", str(job), "--sandbox", "local", "--proxy-url", proxy_url,
         "--policy-url", policy_url, "--output", str(folder / "jobs"), "--base-dir", str(job.parent)],
        capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        sys.exit(f"veri train (max_staleness {staleness}) failed:\n{done.stderr[-4000:]}")
    generation = httpx.get(f"{policy_url}/stats").json()["generation_s"] - generation_before
    metrics = read_metrics(folder / "jobs" / "job" / "metrics.jsonl")
    failed = [(m["step"], m["rollouts"] - m["trainable"]) for m in metrics if m["trainable"] < m["rollouts"]]
    if failed:  # a step of failed rollouts is fast and trains nothing: its time says nothing
        sys.exit(f"max_staleness {staleness}: rollouts not trainable (step, how many): {failed};"
                 f" veri debug {folder / 'jobs' / 'job' / 'trajectories'} says why")
    # policy busy here: the hf server's forward-pass seconds over the steps' (what its /stats counts)
    return {**job_figures(metrics), "policy_busy": generation / sum(m["time/step_s"] for m in metrics)}


if __name__ == "__main__":
    main()
