"""`veri doctor` (docs/gpu.md, "Before a first run"): the host's facts that decide a first run, read through a stand-in
nvidia-smi on PATH (driver 550 / 580; 1, 2, 4, 8 GPUs; 24, 80, 141 GB), the real dockerd for the rest.
The container probe runs against this box's dockerd, which has no NVIDIA runtime: it must fail, naming
the toolkit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests import nvidia_smi
from veri.tools.appliance.doctor import diagnose
from veri.tools.appliance.doctor.facts import Fact, Status

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "tests/core/models"


def facts_by_name(facts: list[Fact]) -> dict[str, Fact]:
    return {fact.name: fact for fact in facts}


@pytest.fixture
def smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Install a stand-in nvidia-smi for the given GPUs, first on PATH."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def install(devices: list[nvidia_smi.Gpu]) -> None:
        folder = nvidia_smi.install(tmp_path / "smi", devices)
        monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")

    return install


@pytest.mark.parametrize("count", [1, 2, 4, 8])
@pytest.mark.parametrize("size", [24, 80, 141])
def test_gpus_are_counted_with_their_memory(smi, count: int, size: int):
    smi(nvidia_smi.gpus(count, size))
    found = facts_by_name(diagnose(None, container_probe=False))
    gpus = found["NVIDIA GPUs"]
    gib = nvidia_smi.MEMORY_MIB[size] / 1024
    assert gpus.status == Status.PASS and gpus.found.startswith(f"{count} x {nvidia_smi.NAMES[size]}, {gib:.1f} GiB")
    assert found["NVIDIA driver"].status == Status.PASS and found["MIG"].status == Status.PASS


@pytest.mark.parametrize(("driver", "status"), [("550.54.15", Status.FAIL), ("580.82.07", Status.PASS),
                                                ("575.57.08", Status.FAIL), ("590.44.01", Status.PASS)])
def test_the_driver_against_the_images_cuda_13_build(smi, driver: str, status: Status):
    smi(nvidia_smi.gpus(2, 80, driver=driver))
    fact = facts_by_name(diagnose(None, container_probe=False))["NVIDIA driver"]
    assert fact.status == status, fact
    if status == Status.FAIL:
        assert "580" in fact.fix and driver in fact.found and "Failed to infer device type" in fact.found


@pytest.mark.parametrize(("compute", "status"), [("7.0", Status.FAIL), ("6.0", Status.FAIL), ("7.5", Status.WARN),
                                                 ("8.0", Status.PASS), ("9.0", Status.PASS)])
def test_compute_capability(smi, compute: str, status: Status):
    smi(nvidia_smi.gpus(1, 24, compute_cap=compute))
    fact = facts_by_name(diagnose(None, container_probe=False))["compute capability"]
    assert fact.status == status, fact
    if status == Status.WARN:
        assert "bf16: false" in fact.fix


def test_mig_is_refused_with_the_command_that_turns_it_off(smi):
    smi(nvidia_smi.gpus(2, 80, mig="Enabled"))
    fact = facts_by_name(diagnose(None, container_probe=False))["MIG"]
    assert fact.status == Status.FAIL and "nvidia-smi -i 0,1 -mig 0" in fact.fix


def test_without_a_gpu_it_says_the_cpu_path_is_the_one_available(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert shutil.which("nvidia-smi") is None
    plain = facts_by_name(diagnose(None, container_probe=False))
    assert plain["NVIDIA GPUs"].status == Status.INFO and "CPU path is the one available" in plain["NVIDIA GPUs"].found
    assert "GPU in a container" not in plain  # nothing to probe
    gpu_job = facts_by_name(diagnose(REPO / "config/url_extract.yaml", container_probe=False))
    assert gpu_job["NVIDIA GPUs"].status == Status.FAIL and "url_extract_cpu.yaml" in gpu_job["NVIDIA GPUs"].fix


@pytest.mark.needs("process")
def test_a_job_without_backend_gets_validates_refusal_not_needs_gpus(smi, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch):
    """make train runs doctor before anything else: a job that does not say `backend:` on a box with no NVIDIA
    GPU gets the answer veri validate gives it (JobConfig.unsaid_backend), not "this job needs 1-8 GPUs"."""
    job = _job(tmp_path, "config/url_extract.yaml")
    raw = yaml.safe_load(job.read_text())
    del raw["backend"]
    job.write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    found = facts_by_name(diagnose(job, container_probe=False))
    assert found["backend"].status == Status.FAIL and "`backend:` is not set" in found["backend"].found
    assert "backend: hf" in found["backend"].fix and "backend: vllm" in found["backend"].fix
    assert found["NVIDIA GPUs"].status == Status.INFO and found["images"].status == Status.INFO
    done = subprocess.run([sys.executable, "-m", "veri.cli", "doctor", "--quiet", "--no-container-probe", str(job)],
                          cwd=REPO, env={**os.environ, "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1 and "FAIL  backend" in done.stdout and "needs 1-" not in done.stdout, done.stdout
    smi(nvidia_smi.gpus(2, 80))  # on a GPU box the same job is a vLLM job: no backend fact
    assert "backend" not in facts_by_name(diagnose(job, container_probe=False))


def test_an_nvidia_smi_that_fails_is_a_driver_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    broken = tmp_path / "nvidia-smi"
    broken.write_text("#!/bin/sh\necho 'Failed to initialize NVML: Driver/library version mismatch' >&2\nexit 18\n")
    broken.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    fact = facts_by_name(diagnose(None, container_probe=False))["NVIDIA GPUs"]
    assert fact.status == Status.FAIL and "version mismatch" in fact.found and "load the NVIDIA driver" in fact.fix


def _job(tmp_path: Path, source: str) -> Path:
    raw = yaml.safe_load((REPO / source).read_text())
    model = tmp_path / "Qwen3-4B"
    model.mkdir()
    shutil.copy(MODELS / "qwen3-4b/config.json", model / "config.json")
    (model / "tokenizer_config.json").write_text("{}")
    raw["model"] = str(model)
    for key in ("harness_bundle",):
        raw[key] = str(REPO / raw[key])
    raw["dataset"]["path"] = str(REPO / raw["dataset"]["path"])
    raw["rewards"][0]["file"] = str(REPO / raw["rewards"][0]["file"])
    path = tmp_path / Path(source).name
    path.write_text(yaml.safe_dump(raw))
    return path


def test_the_jobs_model_folder_and_plan(smi, tmp_path: Path):
    job = _job(tmp_path, "config/url_extract.yaml")
    smi(nvidia_smi.gpus(1, 24))
    small = facts_by_name(diagnose(job, container_probe=False))
    assert small["model"].status == Status.FAIL and "safetensors" in small["model"].found  # config.json only
    assert small["plan"].status == Status.FAIL and "the trainer needs ~74" in small["plan"].found
    assert small["images"].status == Status.FAIL and "make images-gpu" in small["images"].fix
    smi(nvidia_smi.gpus(2, 80))
    big = facts_by_name(diagnose(job, container_probe=False))
    assert big["plan"].status == Status.PASS and "trainer on GPU 0" in big["plan"].found


@pytest.mark.needs("process")
def test_the_cli_exits_1_on_a_failure_and_prints_each_fix(tmp_path: Path):
    folder = nvidia_smi.install(tmp_path / "smi", nvidia_smi.gpus(4, 80, driver="550.54.15"))
    env = {"PATH": f"{folder}:/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "veri.cli", "doctor", "--no-container-probe"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    failing = done.stdout.splitlines()
    row = next(index for index, line in enumerate(failing) if "FAIL  NVIDIA driver" in line)
    assert "fix: install NVIDIA driver 580 or newer" in failing[row + 1]
    assert failing[-1].startswith("veri doctor: 1 problem")
    quiet = subprocess.run([sys.executable, "-m", "veri.cli", "doctor", "--no-container-probe", "--json"], cwd=REPO,
                           env=env, capture_output=True, text=True, timeout=120)
    assert {fact["name"] for fact in json.loads(quiet.stdout)} >= {"NVIDIA GPUs", "NVIDIA driver", "docker", "disk"}


def _docker_answers() -> bool:
    return shutil.which("docker") is not None and subprocess.run(
        ["docker", "info"], capture_output=True, timeout=60).returncode == 0


@pytest.mark.needs("docker")
@pytest.mark.skipif(not _docker_answers(), reason="needs dockerd (make docker)")
def test_the_container_probe_fails_without_the_nvidia_runtime_and_leaves_nothing(smi):
    """This box's dockerd has no NVIDIA runtime: compose's device request cannot be met."""
    info = json.loads(subprocess.run(["docker", "info", "-f", "{{json .Runtimes}}"], capture_output=True,
                                     text=True, timeout=60).stdout)
    if "nvidia" in info:
        pytest.skip("this dockerd has the NVIDIA runtime: the probe would pass or fail on the GPUs themselves")
    smi(nvidia_smi.gpus(2, 80))
    before = subprocess.run(["docker", "ps", "-aq", "--filter", "label=org.veri.doctor"], capture_output=True,
                            text=True, timeout=60).stdout.split()
    found = facts_by_name(diagnose(None))
    probe = found["GPU in a container"]
    assert probe.status == Status.FAIL and "nvidia-container-toolkit" in probe.fix, probe
    assert found["docker"].status == Status.PASS
    after = subprocess.run(["docker", "ps", "-aq", "--filter", "label=org.veri.doctor"], capture_output=True,
                           text=True, timeout=60).stdout.split()
    assert after == before  # the failed container was removed
