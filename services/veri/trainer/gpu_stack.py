"""The package versions the GPU path runs together, and a check the trainer runs before a vLLM job.

The versions live in one constraints file, veri/core/pins/gpu-stack.txt (package data): the image
builds install under it (`make vendor-gpu`, `make vendor-vllm-cpu`) and this module reads it, so the
images and the check cannot drift apart. Why these versions:

TRL's server mode pushes weights over NCCL through vLLM's weight-transfer routes, with vLLM's own
trainer-side helpers (trl/generation/vllm_client.py), so the trainer image and the vLLM policy image
need the same vLLM, inside TRL's supported window:

    trl 1.16.0            supports vLLM 0.22.0 - 0.31.0 (its `vllm` extra; `is_vllm_available` warns outside)
    vllm 0.31.0           pins torch 2.13.0; needs transformers >=5.10.4,<5.18 and fastapi >=0.133,<0.137
    transformers 5.17.0   the newest release vLLM 0.31 accepts (it wants huggingface-hub <2)

veri's CPU stack pins transformers 5.24.0 and fastapi >=0.160 (the proxy and the hf policy server need
them), which vLLM 0.31 refuses; so the GPU trainer image installs these pins and veri without its
dependencies (`pip install --no-deps`), and runs only the trainer. The policy image runs `vllm serve`
with VLLM_SERVER_DEV_MODE=1 and `--weight-transfer-config '{"backend": "nccl"}'` (what TRL's client asks
for); the proxy keeps running on the CPU stack.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from importlib.resources import files

from packaging.requirements import Requirement
from packaging.version import Version

PINS_FILE = files("veri.core").joinpath("pins", "gpu-stack.txt")


def read_pins(text: str) -> dict[str, Requirement]:
    """A constraints file's requirements by package name (comments and blank lines skipped)."""
    lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return {(req := Requirement(line)).name: req for line in lines if line}


# Every line of the pins file; GPU_PINS: the exact ones (`name==version`) as plain versions.
GPU_CONSTRAINTS: dict[str, Requirement] = read_pins(PINS_FILE.read_text())
GPU_PINS: dict[str, str] = {
    name: spec.version
    for name, req in GPU_CONSTRAINTS.items()
    for spec in req.specifier
    if spec.operator == "==" and len(req.specifier) == 1
}


def gpu_stack_problems() -> list[str]:
    """Each installed package outside the pins file (a local build tag like +cu130 or +cpu is fine)."""
    problems = []
    for package, req in GPU_CONSTRAINTS.items():
        install = f"pip install {package}=={GPU_PINS[package]}" if package in GPU_PINS else f"pip install '{req}'"
        try:
            found = version(package)
        except PackageNotFoundError:
            problems.append(f"{package} is not installed: {install}")
            continue
        if not req.specifier.contains(Version(found).public, prereleases=True):
            wanted = GPU_PINS.get(package, str(req.specifier))
            problems.append(f"{package} {found} is installed, the GPU path is tested with {wanted}: {install}")
    return problems
