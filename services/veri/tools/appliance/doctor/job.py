"""The job's side: the images it runs in (present, and built from this checkout), its model folder,
and its plan on this box (the planner's verdict, memory included: veri.gpu.planner / veri.gpu.memory)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from veri.core.config import Backend, JobConfig
from veri.gpu.job import plan_job, unsaid_backend
from veri.gpu.planner import GpuInventory, GpuVendor, LayoutError, PolicyDevice
from veri.tools.appliance.doctor.facts import Fact, Status

BUILT_BY_TRAIN = {"tiny", "tiny-vllm", "smollm2"}  # veri's own models: make train builds them
GPU_IMAGES = ("vllm", "trainer-gpu")
DIGEST_TIMEOUT_S = 300


def gpu_job(config: JobConfig | None) -> bool:
    return config is not None and config.backend == Backend.VLLM and config.device != PolicyDevice.CPU


def image_prefix() -> str:
    return os.environ.get("IMAGE_PREFIX") or "veri"


def present(client: Any, tag: str) -> dict[str, Any] | None:
    """The image's labels when it exists locally (None: it does not)."""
    import docker
    import requests

    if client is None:
        return None
    try:
        return client.images.get(tag).labels or {}
    except (docker.errors.DockerException, requests.RequestException):  # ImageNotFound, or dockerd gone
        return None


def backend_fact(config: JobConfig | None, inventory: GpuInventory | None) -> Fact | None:
    """A job without `backend:` on a box with no NVIDIA GPU: refused as `veri validate` and the trainer refuse
    it, from the same place (JobConfig.unsaid_backend); None when the job says its backend or GPUs are here."""
    if config is None:
        return None
    unsaid = unsaid_backend(config, inventory or GpuInventory(0, GpuVendor.NONE))
    return Fact("backend", Status.FAIL, unsaid.message, unsaid.fix) if unsaid else None


def image_facts(client: Any, config: JobConfig | None, repo: Path, *, needs_gpus: bool,
                backend_unsaid: bool = False) -> list[Fact]:
    if backend_unsaid:
        return [Fact("images", Status.INFO, "not checked: which images a job runs in depends on its backend (above)")]
    if not needs_gpus:
        return [Fact("images", Status.INFO, "make train builds (or finds up to date) the images a CPU job needs")]
    prefix = image_prefix()
    tags = [f"{prefix}/{name}" for name in GPU_IMAGES]
    missing = [tag for tag in tags if present(client, tag) is None]
    if missing:
        return [Fact("images", Status.FAIL, f"no {', '.join(missing)}",
                     "make vendor-gpu (online, once), then make images-gpu (offline)")]
    wanted = _gpu_digests(repo)
    if wanted is None:
        return [Fact("images", Status.WARN, f"{', '.join(tags)} present; whether they hold this checkout's veri"
                     " cannot be told without vendor/wheels/gpu", "make images-gpu where vendor/ is")]
    labels = present(client, f"{prefix}/vllm") or {}
    if labels.get("org.veri.inputs") != wanted.get(f"{prefix}/vllm"):
        return [Fact("images", Status.FAIL, f"{prefix}/vllm was built from other sources than this checkout"
                     " (veri's code or the pins changed since)", "make images-gpu (offline; rebuilds what changed)")]
    return [Fact("images", Status.PASS, f"{', '.join(tags)} up to date with this checkout")]


def _gpu_digests(repo: Path) -> dict[str, str] | None:
    """What make images-gpu would label each image with now (its DIGESTS_TO dry run: nothing is built)."""
    from veri.gpu.pins import GPU_PINS

    vendor = Path(os.environ.get("VENDOR") or repo / "vendor")
    if not (vendor / "wheels/gpu/lock.txt").is_file():
        return None
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "digests"
        env = {**os.environ, "DIGESTS_TO": str(out), "VENDOR": str(vendor), "IMAGE_PREFIX": image_prefix(),
               "VLLM_VERSION": GPU_PINS["vllm"]}
        try:
            subprocess.run([str(repo / "scripts/docker/images-gpu.sh")], cwd=repo, env=env, capture_output=True,
                           timeout=DIGEST_TIMEOUT_S, check=True)
            lines = out.read_text().splitlines()
        except (OSError, subprocess.SubprocessError):
            return None
    return dict(line.split(" ", 1) for line in lines if " " in line)


def model_fact(config: JobConfig | None) -> Fact:
    if config is None:
        return Fact("model", Status.INFO, "no job given (veri doctor CONFIG checks its model folder)")
    path = config.model
    if not (path / "config.json").is_file():
        if path.name in BUILT_BY_TRAIN:
            return Fact("model", Status.INFO, f"{path}: veri's own {path.name}, built by make train")
        return Fact("model", Status.FAIL, f"{path}: " + ("no such folder" if not path.is_dir() else "no config.json"),
                    "copy the model (config.json, tokenizer files, *.safetensors) there, or point `model:` at it;"
                    " veri never downloads models")
    if not any((path / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        return Fact("model", Status.FAIL, f"{path}: no tokenizer files", "copy the tokenizer files into the folder")
    weights = sorted(path.glob("*.safetensors"))
    if not weights and sorted(path.glob("*.bin")):
        return Fact("model", Status.WARN, f"{path}: PyTorch .bin weights only: they load, but the planner reads"
                    " the model's size from config.json alone", "save it as safetensors (save_pretrained)")
    if not weights:
        return Fact("model", Status.FAIL, f"{path}: no weights (*.safetensors)",
                    "copy the safetensors weights (git lfs pull in a git checkout of the model)")
    size = sum(file.stat().st_size for file in weights) / 1e9
    return Fact("model", Status.PASS, f"{path}: {len(weights)} safetensors file(s), {size:.1f} GB")


def plan_fact(config: JobConfig | None, inventory: GpuInventory | None) -> Fact | None:
    """The job's plan on these GPUs (memory estimated); None when there is nothing to plan here."""
    if not gpu_job(config) or inventory is None or inventory.count == 0:
        return None
    assert config is not None
    if not (config.model / "config.json").is_file():
        return Fact("plan", Status.INFO, "not made: the model folder is missing (above)")
    try:
        plan = plan_job(config, inventory)
    except LayoutError as error:
        found = error.each()
        return Fact("plan", Status.FAIL, "; and ".join(each.message for each in found),
                    "; and ".join(each.fix for each in found))
    summary = plan.describe().splitlines()[0]
    memory = [note.split(": ", 1)[1].split(" (")[0] for note in plan.notes if note.startswith("trainer memory")]
    return Fact("plan", Status.PASS, summary + (f"; trainer ~{memory[0].split('~')[-1]}" if memory else ""))
