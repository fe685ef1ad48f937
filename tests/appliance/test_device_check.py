"""bench/device_check.py (docs/gpu.md, "Measured on an H200"): the GPU check runs the same code on CPU with the tiny
model, so the script never rots; veri's nvidia-smi parsers read the output a real H200 printed (recorded by that check,
tests/appliance/fixtures), not only the stand-in's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from veri.gpu.planner import probe_gpus
from veri.tools.appliance.doctor.facts import Status
from veri.tools.appliance.doctor.gpus import QUERY, gpu_facts, read_gpus

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def recorded_h200(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An nvidia-smi on PATH that prints what the real one printed on an H200 for veri's two queries."""
    doctor, planner = (FIXTURES / f"nvidia-smi-h200-{name}.txt" for name in ("doctor", "planner"))
    script = tmp_path / "nvidia-smi"
    script.write_text(f"""#!/bin/sh
case "$*" in
  *"--query-gpu={QUERY} "*) cat {doctor} ;;
  *"--query-gpu=name,memory.total "*) cat {planner} ;;
  *) echo "recorded nvidia-smi: no output recorded for: $*" >&2; exit 2 ;;
esac
""")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_doctor_reads_a_real_h200(recorded_h200):
    gpus = read_gpus()
    assert gpus is not None and len(gpus) == 1
    gpu = gpus[0]
    assert (gpu.name, gpu.memory_mib, gpu.driver, gpu.compute, gpu.mig) == (
        "NVIDIA H200", 143771.0, "580.159.04", (9, 0), "Disabled")
    facts = {fact.name: fact for fact in gpu_facts(gpus, gpu_job=True)}
    assert {name: fact.status for name, fact in facts.items()} == {
        "NVIDIA GPUs": Status.PASS, "NVIDIA driver": Status.PASS, "compute capability": Status.PASS, "MIG": Status.PASS}
    assert "140.4 GiB" in facts["NVIDIA GPUs"].found


def test_the_planner_probe_reads_a_real_h200(recorded_h200):
    inventory = probe_gpus()
    assert (inventory.count, inventory.names) == (1, ("NVIDIA H200",))
    assert inventory.memory_gib == pytest.approx(143771 / 1024)


@pytest.mark.needs("process")
def test_the_check_runs_on_cpu_with_the_tiny_model(tmp_path: Path):
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "bench/device_check.py", "--device", "cpu", "--shapes", "tiny", "--lengths", "32",
         "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((out / "device_check.json").read_text())
    assert report["problems"] == []
    runs = {run["mode"]: run for run in report["runs"]}
    assert set(runs) == {"full", "lora"}
    for run in runs.values():  # one real GRPO step each through veri's trainer, timed
        assert run["status"] == "ok", run
        assert run["step_s"] > 0 and run["tokens_per_s"] > 0 and run["estimate_gib"] > 0
        assert set(run["decisions"]) == {"24", "48", "80", "141"}
    assert "LoRA + grads + AdamW" in runs["lora"]["estimate_parts"] and "AdamW" in runs["full"]["estimate_parts"]
    sync = report["weight_sync"]  # the filesystem sync's file, written as the trainer writes it and read back
    assert sync["bytes"] > 0 and sync["write_gb_s"] > 0 and sync["read_gb_s"] > 0
    table = (out / "device_check.md").read_text()
    assert "| tiny | full | 32 | 8 |" in table and "| tiny | lora | 32 | 8 |" in table
