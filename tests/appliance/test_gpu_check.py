"""bench/gpu_check.sh plans on every shape it claims (docs/gpu.md, "On a GPU box"): its planning step (the jobs it
writes, through `veri stack-env`) with a stand-in nvidia-smi for 1, 2, 4 and 8 GPUs; and its summary
table (the one a user pastes into a bug report) from the rows its report appends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests import nvidia_smi

pytestmark = pytest.mark.needs("process")

REPO = Path(__file__).resolve().parents[2]


def _env(tmp_path: Path, count: int) -> dict[str, str]:
    folder = nvidia_smi.install(tmp_path / "smi", nvidia_smi.gpus(count, 80))
    env = {key: value for key, value in os.environ.items() if key != "CUDA_VISIBLE_DEVICES"}
    return {**env, "PATH": f"{folder}:{env['PATH']}", "GPU_CHECK_OUT": str(tmp_path / "out")}


@pytest.mark.parametrize("count", [1, 2, 4, 8])
def test_its_planning_step_plans_every_gpu_count(tmp_path: Path, count: int):
    done = subprocess.run(["bench/gpu_check.sh"], cwd=REPO, env={**_env(tmp_path, count), "PLAN_ONLY": "1"},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    plans = [line for line in done.stderr.splitlines() if line.startswith("veri stack-env: ")]
    # filesystem; with 2+ GPUs nccl, and the async comparison's job at max_staleness 0 and 1
    assert len(plans) == (1 if count == 1 else 4), done.stderr
    shape = "1 GPU: trainer and policy (vLLM)" if count == 1 else f"{count} GPUs: trainer on GPU 0"
    assert all(shape in plan for plan in plans), plans
    jobs = sorted((tmp_path / "out").glob("job-cuda-*.yaml"))
    sleeping = ["vllm_sleep_mode: true" in job.read_text() for job in jobs]
    assert sleeping == [count == 1] * len(jobs)  # sleep mode on the shared GPU only
    compared = sorted((tmp_path / "out").glob("job-cuda-async-*.yaml"))
    if count == 1:  # nothing could run while the trainer steps on the one shared GPU
        assert not compared and "async vs sync: not on 1 GPU" in done.stdout
    else:
        knobs = [yaml.safe_load(job.read_text()) for job in compared]
        assert [k["max_staleness"] for k in knobs] == [0, 1]
        assert all(k["weight_sync"] == "nccl" and k["harness_bundle"] == "bench/bundles/slow_tool" for k in knobs)


def test_the_cpu_twins_job_as_it_was_is_refused_on_two_gpus(tmp_path: Path):
    """What the planning step fixes: the CPU twin's job keeps vllm_sleep_mode, which 2+ GPUs refuse."""
    job = tmp_path / "job.yaml"
    job.write_text((REPO / "config/url_extract_vllm_cpu.yaml").read_text().replace("device: cpu", "device: cuda")
                   .replace("vllm_data_parallel_size: 2", "vllm_data_parallel_size: auto"))
    done = subprocess.run([str(REPO / ".venv/bin/veri"), "stack-env", str(job), "--state", str(tmp_path / "s")],
                          cwd=REPO, env=_env(tmp_path, 2), capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "vllm_sleep_mode" in done.stderr, done.stderr


def test_the_summary_table_has_the_box_and_one_row_per_backend(tmp_path: Path):
    rows = tmp_path / "summary.jsonl"
    row = {"sync": "nccl", "plan": "4 GPUs: trainer on GPU 0; policy (vLLM) TP=1 x DP=3 on GPUs 1,2,3",
           "split": {"rollout": 3.5, "reward": 0.1, "train": 2.25, "weight_sync": 0.5}, "sync_s": 0.5,
           "sync_gb_s": 1.25, "is_ratio": 1.0002, "moved": 0.2, "sleep_freed_gib": None, "proxy_direct": 0.97}
    compared = {"async": "async/sync step time: 0.55 (max_staleness 1; staleness max 1; reward sync 0.400 async"
                         " 0.410; policy busy 40% -> 75%; dropped 0%)"}
    rows.write_text("".join(json.dumps(r) + "\n" for r in
                            (row, {**row, "sync": "filesystem", "sync_gb_s": None}, compared)))
    doctor = tmp_path / "doctor.txt"
    doctor.write_text("  PASS  NVIDIA GPUs  4 x NVIDIA H100\n  WARN  disk  12 GB free\n")
    env = _env(tmp_path, 4)
    done = subprocess.run([sys.executable, "bench/gpu_check_report.py", "--table", str(rows), "--doctor", str(doctor)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "gpu_check on cuda: 4 x NVIDIA H100 80GB HBM3 (81559 MiB); driver 580.82.07"
    assert "veri doctor: WARN  disk  12 GB free" in done.stdout
    table = [line for line in lines if line.startswith("| ")]
    assert len(table) == 3 and "sync GB/s" in table[0]
    assert table[1].split(" | ")[2:] == ["3.50 / 0.10 / 2.25 / 0.50", "1.25", "1.0002", "0.200", "n/a", "0.970 |"]
    assert table[2].startswith("| filesystem |") and "| n/a |" in table[2]
    assert lines[-1] == compared["async"]  # below the table


def test_the_async_comparison_reads_both_jobs_metrics(tmp_path: Path):
    """Step time over the steps after the first, the async job's staleness, each job's mean reward and
    the replicas' mean utilisation, into the line bench/async_step.py ends with."""
    def job(name: str, steps: list[dict]) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in steps))
        return folder

    sync = job("sync", [{"step": s, "time/step_s": t, "reward/mean": 0.5, "utilisation/policy_0": 0.4,
                         "utilisation/policy_1": 0.2} for s, t in enumerate((30.0, 10.0, 12.0))])
    one = job("async", [{"step": s, "time/step_s": t, "reward/mean": r, "staleness/max": m, "rollouts": 8,
                         "rollouts/stale_dropped": d, "utilisation/policy_0": 0.8, "utilisation/policy_1": 0.6}
                        for s, (t, r, m, d) in enumerate(((30.0, 0.4, 0, 0), (6.0, 0.6, 1, 2), (5.0, 0.5, 1, 0)))])
    summary = tmp_path / "summary.jsonl"
    done = subprocess.run([sys.executable, "bench/gpu_check_report.py", "--async", str(sync), str(one),
                           "--summary", str(summary)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    line = ("async/sync step time: 0.50 (max_staleness 1; staleness max 1; reward sync 0.500 async 0.500;"
            " policy busy 30% -> 70%; dropped 8%)")  # 2 of the 26 rollouts its steps took
    assert done.stdout.strip() == line
    assert json.loads(summary.read_text())["async"] == line
