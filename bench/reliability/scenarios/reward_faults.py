"""Reward functions that hang, raise, exit, or return NaN / None / a string / inf / the wrong length,
through `veri train` (local sandboxes, a real hf policy server and capture proxy, TRL GRPO steps).

Every such rollout must end as `reward_error` with the kind of fault in its verdict (the hang's message
naming reward_timeout_s), be masked (reward None, not trainable: never scored 0 as a wrong answer),
and every step must still train on the well-scored rollouts; the job finishes. Each task of the
dataset names the fault its reward call makes (the `reward_fault` column), so a step holds every kind.
tests/trainer/test_reward_faults.py runs the same job and checks (`check_job`) with fewer steps.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.reliability.scenarios import failing_row

ROOT = Path(__file__).resolve().parents[3]
NAME = "reward_faults"
REWARD_TIMEOUT_S = 2.0

# fault -> the verdict's kind (None: "no reward function returned a value", which has none)
FAULTS: dict[str, str | None] = {
    "raise": "exception", "exit": "exception", "hang": "timeout", "string": "bad_value", "wrong_length": "bad_value",
    "inf": "bad_value", "nan": None, "none": None,
}
MESSAGES = {  # a piece of each fault's verdict message: what a person reads
    "raise": "raised RuntimeError: judge unavailable", "exit": "raised SystemExit: 2",
    "hang": f"did not return within reward_timeout_s={REWARD_TIMEOUT_S:g}s", "string": "returned '1.0'",
    "wrong_length": "returned 2 values for 1 completion", "inf": "returned inf: return a finite number",
    "nan": "no reward function returned a value", "none": "no reward function returned a value",
}

REWARD = '''
import math, sys, time

def reward(completions, outputs, reward_fault, **kwargs):
    fault = reward_fault[0]
    if fault == "raise":
        raise RuntimeError("judge unavailable")
    if fault == "exit":
        sys.exit(2)
    if fault == "hang":
        time.sleep(3600)
    if fault == "string":
        return ["1.0"]
    if fault == "wrong_length":
        return [1.0, 0.0]
    if fault == "inf":
        return [math.inf]
    if fault == "nan":
        return [math.nan]
    if fault == "none":
        return [None]
    answer = (outputs[0] / "answer.txt").read_text()
    return [1.0 if "beta" in answer else 0.0]
'''


def write_reward_job(folder: Path, model: Path, *, max_steps: int, rollouts_per_prompt: int = 2) -> Path:
    """The trainer tests' two-call tool loop (tests/trainer/conftest.py), one task per fault plus a healthy one."""
    from testkit.trainer_jobs import MAX_TOKENS, write_bundle, write_tasks

    folder.mkdir(parents=True, exist_ok=True)
    write_bundle(folder / "bundle")
    faults = ["ok", *FAULTS]
    write_tasks(folder / "tasks.jsonl", [{"prompt": "Look up the answer, please.", "reward_fault": f} for f in faults])
    (folder / "reward.py").write_text(REWARD)
    rollouts = len(faults) * rollouts_per_prompt
    config = {
        "model": str(model), "backend": "hf", "dataset": {"path": "tasks.jsonl"}, "harness_bundle": "bundle",
        "rewards": [{"file": "reward.py"}], "reward_timeout_s": REWARD_TIMEOUT_S,
        "rollouts_per_prompt": rollouts_per_prompt, "max_response_length": 64,
        "sampling": {"max_tokens": MAX_TOKENS}, "learning_rate": 1e-4, "max_steps": max_steps,
        "harness_timeout_s": 120, "max_parallel_rollouts": rollouts,
        "grpo": {"per_device_train_batch_size": rollouts},
    }
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def check_job(job_dir: Path, steps: int) -> tuple[dict[str, int], list[str]]:
    """(counts, problems) over the archived job: every faulty rollout a masked reward_error of its kind,
    every healthy one scored and trainable, every step's metrics line written with a finite loss."""
    from veri.archive import ArchiveIndex, read_metrics

    problems: list[str] = []
    counts = {"rollouts": 0, "reward_error": 0, "trainable": 0}
    with ArchiveIndex(job_dir) as index:
        rows = index.rollouts(limit=100_000)
        records = [index.read_rollout(row["path"]) for row in rows]
    for record in records:
        counts["rollouts"] += 1
        fault = record.task["reward_fault"]
        where = f"step {record.policy_step} rollout {record.rollout_id} ({fault})"
        verdicts = [v for v in record.verdicts if v.rule == "reward_error"]
        if fault == "ok":
            counts["trainable"] += record.trainable
            if not record.trainable or record.reward is None or record.reward.reward is None:
                problems.append(f"{where}: healthy but not scored and trainable: {record.verdicts}")
            continue
        counts["reward_error"] += bool(verdicts)
        if record.trainable or record.reward is None or record.reward.reward is not None or len(verdicts) != 1:
            problems.append(f"{where}: not masked as one reward_error: {record.reward}")
            continue
        if verdicts[0].details.get("kind") != FAULTS[fault] or MESSAGES[fault] not in verdicts[0].message:
            problems.append(f"{where}: verdict {verdicts[0].details.get('kind')!r}: {verdicts[0].message}")
    metrics = read_metrics(job_dir / "metrics.jsonl")
    if [line["step"] for line in metrics] != list(range(steps)):
        problems.append(f"metrics lines for steps {[line['step'] for line in metrics]}, not 0..{steps - 1}")
    for line in metrics:
        faulty = len(FAULTS) * (line["rollouts"] // (len(FAULTS) + 1))
        if not line.get("trainable") or line.get("rule/reward_error") != faulty:
            problems.append(f"step {line['step']}: trainable {line.get('trainable')}, "
                            f"reward_error {line.get('rule/reward_error')} of {line['rollouts']}")
        if not isinstance(line.get("train/loss"), float):
            problems.append(f"step {line['step']}: no training loss ({line.get('train/loss')!r})")
    if counts["rollouts"] != steps * (len(FAULTS) + 1) * 2:
        problems.append(f"{counts['rollouts']} rollouts archived, expected {steps * (len(FAULTS) + 1) * 2}")
    return counts, problems


def train(job: Path, policy_url: str, proxy_url: str, output: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "veri.cli", "train", str(job), "--sandbox", "local", "--proxy-url", proxy_url,
               "--policy-url", policy_url, "--output", str(output), "--base-dir", str(job.parent)]
    return subprocess.run(command, capture_output=True, text=True, timeout=1800, cwd=ROOT)


def run(quick: bool) -> dict[str, Any]:
    from testkit.servers import start_server
    from testkit.trainer_jobs import MAX_TOKENS, SCRIPT

    steps = 2 if quick else 5
    model = ROOT / "build" / "models" / "tiny"
    row = failing_row(NAME)
    if not (model / "config.json").is_file():
        return {**row, "notes": "no tiny model: run `make tiny-model`"}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="veri-reward-faults-") as tmp:
        folder = Path(tmp)
        script = folder / "script.json"
        script.write_text(json.dumps(SCRIPT))
        policy_args = ["serve", "policy", "--model", str(model), "--scripted-replies", str(script), "--threads", "1"]
        with start_server(policy_args) as policy:
            proxy_args = ["serve", "proxy", "--policy-url", policy.url, "--model", str(model),
                          "--store", str(folder / "spans"), "--max-tokens", str(MAX_TOKENS)]
            with start_server(proxy_args) as proxy:
                job = write_reward_job(folder / "job", model, max_steps=steps)
                result = train(job, policy.url, proxy.url, folder / "jobs")
        if result.returncode != 0:
            return {**row, "notes": f"veri train exited {result.returncode}: {result.stderr.strip()[-300:]}"}
        counts, problems = check_job(folder / "jobs" / "job", steps)
    row["runs"] = counts["rollouts"]
    notes = (f"{steps} steps: {counts['reward_error']} reward_error (8 kinds) masked, {counts['trainable']} healthy "
             f"trained; {time.monotonic() - started:.0f} s")
    if problems:
        return {**row, "notes": f"{len(problems)} problems, first: {problems[0]}"}
    return {**row, "outcome": "pass", "notes": notes}
