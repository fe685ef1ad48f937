"""The GPUs as nvidia-smi (on PATH) reports them, against what the images' CUDA build needs.

The GPU images carry PyPI's torch 2.13 and vLLM 0.31, built for CUDA 13.0: the NVIDIA driver must be
580 or newer (CUDA 13.0's minimum on Linux, 580.65.06), and CUDA 13 has no kernels for compute
capability below 7.5 (Maxwell, Pascal, Volta: V100 is 7.0). bfloat16 needs 8.0 (Ampere): a T4 (7.5)
runs, but not the shipped jobs' `bf16: true`. MIG slices are refused: the plan hands out whole GPUs.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from veri.gpu.planner import MAX_GPUS
from veri.tools.appliance.doctor.facts import Fact, Status

QUERY = "index,name,memory.total,driver_version,compute_cap,mig.mode.current"
MIN_DRIVER = 580  # CUDA 13.0 (torch 2.13 / vLLM 0.31 from PyPI)
MIN_COMPUTE = (7, 5)  # CUDA 13 dropped Maxwell, Pascal and Volta
BF16_COMPUTE = (8, 0)
CPU_PATH = ("the CPU path is the one available: make train CONFIG=config/url_extract_cpu.yaml (backend hf),"
            " or config/url_extract_vllm_cpu.yaml (vLLM's CPU build)")


@dataclass(frozen=True)
class Gpu:
    index: str
    name: str
    memory_mib: float | None
    driver: str
    compute: tuple[int, int] | None
    mig: str


class SmiError(Exception):
    """nvidia-smi is on PATH but does not answer (no driver loaded, a driver/library mismatch)."""


def read_gpus() -> list[Gpu] | None:
    """The GPUs nvidia-smi lists; None when there is no nvidia-smi on PATH."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        done = subprocess.run(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as error:
        raise SmiError(str(error)) from error
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise SmiError(said[-1] if said else f"exit {done.returncode}")
    return [_parse(line) for line in done.stdout.splitlines() if line.strip()]


def _parse(line: str) -> Gpu:
    index, _, rest = line.partition(",")
    name, memory, driver, compute, mig = (part.strip() for part in ([*rest.rsplit(",", 4), "", "", "", ""][:5]))
    return Gpu(index.strip(), name, _number(memory), driver, _compute(compute), mig)


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:  # [N/A]
        return None


def _compute(text: str) -> tuple[int, int] | None:
    major, _, minor = text.partition(".")
    return (int(major), int(minor or 0)) if major.isdigit() and (minor or "0").isdigit() else None


def gpu_facts(gpus: list[Gpu] | None, *, gpu_job: bool, error: str | None = None) -> list[Fact]:
    """GPUs, driver, compute capability, MIG. `gpu_job`: the job needs GPUs (no GPU is then a failure)."""
    if error is not None:
        return [Fact("NVIDIA GPUs", Status.FAIL, f"nvidia-smi is on PATH but fails: {error}",
                     "load the NVIDIA driver (a reboot after installing it, or a driver/library version mismatch"
                     " after an upgrade): `nvidia-smi` must list the GPUs")]
    if not gpus:
        found = "none (no nvidia-smi on PATH)" if gpus is None else "nvidia-smi lists no GPU"
        if gpu_job:
            return [Fact("NVIDIA GPUs", Status.FAIL, f"{found}: this job needs 1-{MAX_GPUS} NVIDIA GPUs",
                         f"run it on a GPU box with the NVIDIA driver installed; here {CPU_PATH}")]
        return [Fact("NVIDIA GPUs", Status.INFO, f"{found}: {CPU_PATH}")]
    return [_count(gpus), _driver(gpus), _capability(gpus), _mig(gpus)]


def _count(gpus: list[Gpu]) -> Fact:
    sizes = sorted({round(gpu.memory_mib / 1024, 1) for gpu in gpus if gpu.memory_mib})
    names = sorted({gpu.name for gpu in gpus})
    found = f"{len(gpus)} x {' + '.join(names)}, " + (
        f"{sizes[0]:g} GiB each" if len(sizes) == 1 else f"{' / '.join(f'{size:g}' for size in sizes)} GiB")
    if len(gpus) > MAX_GPUS:
        return Fact("NVIDIA GPUs", Status.WARN, found + f": veri plans 1-{MAX_GPUS} per job",
                    "set CUDA_VISIBLE_DEVICES to the GPUs a job may use")
    if len(sizes) > 1:
        return Fact("NVIDIA GPUs", Status.WARN, found + ": the planner sizes every GPU as the smallest",
                    "set CUDA_VISIBLE_DEVICES to GPUs of one size")
    return Fact("NVIDIA GPUs", Status.PASS, found)


def _driver(gpus: list[Gpu]) -> Fact:
    driver = gpus[0].driver
    major = driver.split(".")[0]
    if not major.isdigit():
        return Fact("NVIDIA driver", Status.WARN, f"version {driver!r} not understood",
                    f"check `nvidia-smi` reports driver {MIN_DRIVER} or newer")
    if int(major) < MIN_DRIVER:
        return Fact("NVIDIA driver", Status.FAIL,
                    f"{driver}: older than the {MIN_DRIVER} the images' CUDA 13 build (torch 2.13, vLLM 0.31)"
                    " needs; vLLM would stop with \"Failed to infer device type\"",
                    f"install NVIDIA driver {MIN_DRIVER} or newer (your distribution's nvidia-driver-{MIN_DRIVER}"
                    " or NVIDIA's data-center driver), reboot, and check `nvidia-smi`")
    return Fact("NVIDIA driver", Status.PASS, f"{driver} (CUDA 13 needs >= {MIN_DRIVER})")


def _capability(gpus: list[Gpu]) -> Fact:
    known = [gpu for gpu in gpus if gpu.compute is not None]
    if not known:
        return Fact("compute capability", Status.WARN, "nvidia-smi does not report it (a driver before 510?)",
                    f"update the driver to {MIN_DRIVER} or newer")
    low = [gpu for gpu in known if gpu.compute is not None and gpu.compute < MIN_COMPUTE]
    text = ", ".join(sorted({f"{gpu.compute[0]}.{gpu.compute[1]}" for gpu in known if gpu.compute}))
    if low:
        ids = ",".join(gpu.index for gpu in low)
        return Fact("compute capability", Status.FAIL,
                    f"{text}: GPU {ids} below {MIN_COMPUTE[0]}.{MIN_COMPUTE[1]}: CUDA 13 (the images' torch and"
                    f" vLLM) has no kernels for it ({low[0].name})",
                    "use Turing (T4) or newer GPUs; hide these with CUDA_VISIBLE_DEVICES")
    if any(gpu.compute is not None and gpu.compute < BF16_COMPUTE for gpu in known):
        return Fact("compute capability", Status.WARN, f"{text}: no bfloat16 below 8.0",
                    "set `grpo: {bf16: false}` in the job (the shipped jobs train in bf16), and serve in half"
                    " precision")
    return Fact("compute capability", Status.PASS, f"{text} (>= {MIN_COMPUTE[0]}.{MIN_COMPUTE[1]}, bfloat16)")


def _mig(gpus: list[Gpu]) -> Fact:
    enabled = [gpu.index for gpu in gpus if gpu.mig.lower() == "enabled"]
    if enabled:
        ids = ",".join(enabled)
        return Fact("MIG", Status.FAIL, f"enabled on GPU {ids}: the plan hands out whole GPUs",
                    f"disable it: `sudo nvidia-smi -i {ids} -mig 0` (then reset the GPU or reboot), or hide those"
                    " GPUs with CUDA_VISIBLE_DEVICES")
    supported = any(gpu.mig.lower() == "disabled" for gpu in gpus)
    return Fact("MIG", Status.PASS, "off" if supported else "not supported by these GPUs")
