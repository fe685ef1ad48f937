"""The package versions the GPU path runs together, and a check the trainer runs before a vLLM job.

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

GPU_PINS: dict[str, str] = {"trl": "1.16.0", "vllm": "0.31.0", "transformers": "5.17.0", "torch": "2.13.0"}


def gpu_stack_problems() -> list[str]:
    """Each installed package that differs from `GPU_PINS` (a local build tag like +cu130 is fine)."""
    problems = []
    for package, wanted in GPU_PINS.items():
        try:
            found = version(package)
        except PackageNotFoundError:
            problems.append(f"{package} is not installed: pip install {package}=={wanted}")
            continue
        if Version(found).public != wanted:
            problems.append(f"{package} {found} is installed, the GPU path is tested with {wanted}:"
                            f" pip install {package}=={wanted}")
    return problems
