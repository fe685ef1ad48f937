"""The figures `bench/gpu_check.sh` prints for one `make train` job: per step the time split (rollout,
reward, train, weight sync), TRL's importance-sampling ratio (served vs trainer logprobs: ~1 when the
policy serves the trainer's weights), and whether the served logprobs moved with the weights (the last
step's against the original model's). With --summary it appends the job's row of the summary table;
--table prints that table, one a user can paste into an issue. --async SYNC_JOB ASYNC_JOB compares the
same job at max_staleness 0 and 1 (bench/async_figures.py: the line bench/async_step.py ends with) and,
with --summary, appends it for the table.

    python bench/gpu_check_report.py JOB_FOLDER ORIGINAL_MODEL [--sync S --summary FILE --throughput X]
    python bench/gpu_check_report.py --async SYNC_JOB ASYNC_JOB [--summary FILE]
    python bench/gpu_check_report.py --table FILE [--device cuda] [--doctor FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from statistics import mean
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.async_figures import comparison_line, job_figures

IS = "train/sampling/importance_sampling_ratio/"
PHASES = ("rollout", "reward", "train", "weight_sync")
TRAINER_BYTES = 4  # TRL loads the model in float32 (the job sets no model_init_kwargs): what a sync moves


def read_metrics(job: Path) -> list[dict[str, Any]]:
    return [json.loads(text) for text in (job / "metrics.jsonl").read_text().splitlines() if text.strip()]


def step_lines(metrics: list[dict[str, Any]]) -> None:
    print(f"{'step':>4} {'rollout s':>10} {'reward s':>9} {'train s':>8} {'sync s':>7}  IS ratio min / mean / max")
    for line in metrics:
        times = [line.get(f"time/{name}_s") for name in PHASES]
        cells = " ".join(f"{t:>9.2f}" if t is not None else f"{'-':>9}" for t in times)
        ratio = " / ".join(f"{line.get(IS + bound, float('nan')):.4f}" for bound in ("min", "mean", "max"))
        print(f"{line['step']:>4} {cells}  {ratio}")


def logprobs_moved(job: Path, model: Path) -> float:
    """Max |served - original| over the last step's first rollout's sampled tokens."""
    import torch
    from transformers import AutoModelForCausalLM

    from veri.core.rollout_record import RolloutRecord

    last = max(int(path.name.split("-")[1]) for path in (job / "trajectories").iterdir())
    path = next((job / "trajectories" / f"step-{last}").rglob("rollout-*.json"))
    span = RolloutRecord.model_validate_json(path.read_text()).spans[0]
    original = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    ids = torch.tensor([span.prompt_token_ids + span.completion_token_ids])
    with torch.no_grad():
        logits = original(ids).logits[0, len(span.prompt_token_ids) - 1 : -1]
    before = torch.log_softmax(logits, -1).gather(1, torch.tensor(span.completion_token_ids)[:, None]).squeeze(1)
    return (before - torch.tensor(span.completion_logprobs)).abs().max().item()


def summary_row(metrics: list[dict[str, Any]], model: Path, sync: str, moved: float, throughput: str) -> dict[str, Any]:
    """One job's row: the plan (VERI_GPU_PLAN, as make train handed it), mean phase seconds, sync GB/s."""
    from veri.gpu.planner import LayoutError, model_facts, plan_from_env

    try:
        plan = plan_from_env().describe().splitlines()[0]
    except LayoutError:
        plan = "?"
    split = {name: _mean(metrics, f"time/{name}_s") for name in PHASES}
    parameters = model_facts(model).parameters or 0
    sync_s = split["weight_sync"]
    freed = [value for line in metrics for key, value in line.items() if "freed" in key and value is not None]
    return {
        "sync": sync, "plan": plan, "split": split, "sync_s": sync_s,
        "sync_gb_s": parameters * TRAINER_BYTES / 1e9 / sync_s if sync_s else None,
        "is_ratio": _mean(metrics, IS + "mean"), "moved": moved,
        "sleep_freed_gib": max(freed) if freed else None, "proxy_direct": float(throughput) if throughput else None,
    }


def _mean(metrics: list[dict[str, Any]], key: str) -> float | None:
    values = [line[key] for line in metrics if line.get(key) is not None]
    return mean(values) if values else None


def async_row(sync_job: Path, async_job: Path) -> dict[str, Any]:
    sync, one = job_figures(read_metrics(sync_job)), job_figures(read_metrics(async_job))
    return {"async": comparison_line(sync, one), "sync_figures": sync, "async_figures": one}


def table(rows: list[dict[str, Any]], device: str, doctor: Path | None) -> str:
    """Markdown: the box (GPUs, driver) above, one row per weight-sync backend, then the async line."""
    compared = [row["async"] for row in rows if "async" in row]
    rows = [row for row in rows if "async" not in row]
    lines = [f"gpu_check on {device}: {_box(device)}", ""]
    if doctor is not None and doctor.is_file():
        lines_of = [line.strip() for line in doctor.read_text().splitlines()]
        failing = [line for line in lines_of if line.startswith(("FAIL", "WARN"))]
        lines += [f"veri doctor: {'; '.join(failing) if failing else 'all pass'}", ""]
    lines += ["| sync | plan | rollout / reward / train / sync s | sync GB/s | IS ratio | logprobs moved |"
              " sleep freed GiB | proxy/direct |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        split = " / ".join(_cell(row["split"][name], ".2f") for name in PHASES)
        lines.append(f"| {row['sync']} | {row['plan']} | {split} | {_cell(row['sync_gb_s'], '.2f')} |"
                     f" {_cell(row['is_ratio'], '.4f')} | {_cell(row['moved'], '.3f')} |"
                     f" {_cell(row['sleep_freed_gib'], '.1f')} | {_cell(row['proxy_direct'], '.3f')} |")
    if not rows:
        lines.append("| (no job finished: see the log gpu_check named) | | | | | | | |")
    lines += ["", *compared] if compared else []
    return "\n".join(lines)


def _cell(value: float | None, form: str) -> str:
    return "n/a" if value is None else format(value, form)


def _box(device: str) -> str:
    if device != "cuda":
        return f"{os.cpu_count()} CPU cores (the CPU twin)"
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                               "--format=csv,noheader"], capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return "nvidia-smi did not answer"
    gpus = [line.split(", ") for line in done.stdout.splitlines() if line.strip()]
    names = sorted({f"{gpu[0]} ({gpu[1]})" for gpu in gpus})
    return f"{len(gpus)} x {', '.join(names)}; driver {gpus[0][2] if gpus else '?'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("job", type=Path, nargs="?")
    parser.add_argument("model", type=Path, nargs="?")
    parser.add_argument("--sync", default="?")
    parser.add_argument("--summary", type=Path, default=None, help="append this job's row (JSON) here")
    parser.add_argument("--throughput", default="", help="proxy / direct throughput (bench/vllm_throughput.py)")
    parser.add_argument("--table", type=Path, default=None, help="print the summary table of these rows")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--doctor", type=Path, default=None, help="veri doctor's output for the table's header")
    parser.add_argument("--async", dest="compare", type=Path, nargs=2, metavar=("SYNC_JOB", "ASYNC_JOB"),
                        help="the same job at max_staleness 0 and 1: their step time, staleness, reward, policy busy")
    args = parser.parse_args()
    if args.compare is not None:
        row = async_row(*args.compare)
        print(row["async"])
        if args.summary is not None:
            with args.summary.open("a") as out:
                out.write(json.dumps(row) + "\n")
        return
    if args.table is not None:
        rows = [json.loads(line) for line in args.table.read_text().splitlines() if line.strip()]
        print(table(rows, args.device, args.doctor))
        return
    metrics = read_metrics(args.job)
    step_lines(metrics)
    moved = logprobs_moved(args.job, args.model)
    print(f"served logprobs of the last step vs the original model: max |diff| {moved:.4f}"
          f" ({'moved with the weights' if moved > 0.01 else 'DID NOT MOVE: the sync did not reach the policy'})")
    if args.summary is not None:
        with args.summary.open("a") as out:
            out.write(json.dumps(summary_row(metrics, args.model, args.sync, moved, args.throughput)) + "\n")


if __name__ == "__main__":
    main()
