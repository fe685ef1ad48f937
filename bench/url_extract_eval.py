"""Held-out check of the CPU demo: the same prompts, sampling and rewards as config/url_extract_cpu.yaml,
scored for the model before training and after, on tasks the job never trained on.

Generates with transformers directly (the harness makes exactly one chat call: its system prompt plus the
task prompt), `--samples` per task at the job's temperature, then scores with the job's own reward
functions (config/rewards/url_extract.py: `reward` = exact URL, `closeness` = partial credit).

    python bench/url_extract_eval.py --job build/state/jobs/url_extract_cpu \\
        --models build/models/smollm2 build/state/jobs/url_extract_cpu/model
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "harness-bundles" / "url_extract_inline"))
from agent import SYSTEM_PROMPT  # noqa: E402  (the harness's own prompt)

from veri.core.config import RewardConfig  # noqa: E402
from veri.rewards import load_reward_functions  # noqa: E402

REWARDS = REPO / "config/rewards/url_extract.py"


def trained_tasks(job: Path) -> set[int]:
    with sqlite3.connect(job / "index.sqlite") as db:
        return {row[0] for row in db.execute("SELECT DISTINCT task_index FROM rollouts")}


def evaluate(model_dir: Path, rows: list[dict], samples: int, temperature: float, max_tokens: int,
             exact_fn, closeness_fn) -> dict[str, float]:
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    exact, close = [], []
    for row in rows:
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": row["prompt"]}]
        inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                               return_dict=True)
        with torch.no_grad():
            out = model.generate(**inputs, do_sample=True, temperature=temperature, top_p=1.0,
                                 max_new_tokens=max_tokens, num_return_sequences=samples,
                                 pad_token_id=tokenizer.eos_token_id)
        replies = [tokenizer.decode(o[inputs["input_ids"].shape[1]:], skip_special_tokens=True) for o in out]
        completions = [[{"role": "assistant", "content": reply}] for reply in replies]
        expected = [row["expected_url"]] * samples
        exact += exact_fn(prompts=None, completions=completions, expected_url=expected)
        close += closeness_fn(prompts=None, completions=completions, expected_url=expected)
    return {"exact": statistics.fmean(exact), "closeness": statistics.fmean(close)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", type=Path, required=True, help="the job folder (its index.sqlite: tasks trained on)")
    parser.add_argument("--models", type=Path, nargs="+", required=True)
    parser.add_argument("--dataset", type=Path, default=REPO / "config/data/url_extract_inline.jsonl")
    parser.add_argument("--tasks", type=int, default=32, help="held-out tasks to use")
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--max-tokens", type=int, default=48)
    args = parser.parse_args()
    # Loaded as the job loads them (config/url_extract_cpu.yaml's two entries).
    exact_fn, closeness_fn = (f.func for f in load_reward_functions(
        [RewardConfig(file=REWARDS), RewardConfig(file=REWARDS, function="closeness")]))
    seen = trained_tasks(args.job)
    rows = [json.loads(line) for line in args.dataset.read_text().splitlines()]
    held_out = [row for i, row in enumerate(rows) if i not in seen][: args.tasks]
    print(f"{len(held_out)} held-out tasks (the job trained on {len(seen)}), {args.samples} samples each, "
          f"temperature {args.temperature}, max {args.max_tokens} tokens")
    for model_dir in args.models:
        scores = evaluate(model_dir, held_out, args.samples, args.temperature, args.max_tokens, exact_fn, closeness_fn)
        print(f"  {str(model_dir):<50} exact {scores['exact']:.3f}   closeness {scores['closeness']:.3f}"
              f"   reward (exact + 0.5 x closeness) {scores['exact'] + 0.5 * scores['closeness']:.3f}")


if __name__ == "__main__":
    main()
