"""The figures `bench/gpu_check.sh` prints for one `make train` job: per step the time split (rollout,
reward, train, weight sync), TRL's importance-sampling ratio (served vs trainer logprobs: ~1 when the
policy serves the trainer's weights), and whether the served logprobs moved with the weights (the last
step's against the original model's).

    python bench/gpu_check_report.py JOB_FOLDER ORIGINAL_MODEL
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from veri.core.rollouts import RolloutRecord

IS = "train/sampling/importance_sampling_ratio/"


def step_lines(job: Path) -> None:
    print(f"{'step':>4} {'rollout s':>10} {'reward s':>9} {'train s':>8} {'sync s':>7}  IS ratio min / mean / max")
    for line in (json.loads(text) for text in (job / "metrics.jsonl").read_text().splitlines()):
        times = [line.get(f"time/{name}_s") for name in ("rollout", "reward", "train", "weight_sync")]
        cells = " ".join(f"{t:>9.2f}" if t is not None else f"{'-':>9}" for t in times)
        ratio = " / ".join(f"{line.get(IS + bound, float('nan')):.4f}" for bound in ("min", "mean", "max"))
        print(f"{line['step']:>4} {cells}  {ratio}")


def logprobs_moved(job: Path, model: Path) -> float:
    """Max |served - original| over the last step's first rollout's sampled tokens."""
    last = max(int(path.name.split("-")[1]) for path in (job / "trajectories").iterdir())
    path = next((job / "trajectories" / f"step-{last}").rglob("rollout-*.json"))
    span = RolloutRecord.model_validate_json(path.read_text()).spans[0]
    original = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    ids = torch.tensor([span.prompt_token_ids + span.completion_token_ids])
    with torch.no_grad():
        logits = original(ids).logits[0, len(span.prompt_token_ids) - 1 : -1]
    before = torch.log_softmax(logits, -1).gather(1, torch.tensor(span.completion_token_ids)[:, None]).squeeze(1)
    return (before - torch.tensor(span.completion_logprobs)).abs().max().item()


if __name__ == "__main__":
    job, model = Path(sys.argv[1]), Path(sys.argv[2])
    step_lines(job)
    moved = logprobs_moved(job, model)
    print(f"served logprobs of the last step vs the original model: max |diff| {moved:.4f}"
          f" ({'moved with the weights' if moved > 0.01 else 'DID NOT MOVE: the sync did not reach the policy'})")
