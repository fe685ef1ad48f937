"""The host's side of a first run: docker + runsc, a container that actually gets a GPU, disk, /dev/shm."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from veri.core import envs
from veri.tools.appliance.doctor.facts import Fact, Status

GIB = 2**30
MIN_FREE_GB = 10  # checkpoints, archives, harness images
STOP_BELOW_GB = 1  # as scripts/disk-check.sh: below this a build or a checkpoint fails half-way
GPU_IMAGES_GB = 20  # veri/vllm-gpu-deps + veri/vllm while they build
MIN_SHM_GIB = 1.0  # vLLM's workers (TP, DP) and NCCL share tensors through the host's /dev/shm (ipc: host)
PROBE_TIMEOUT_S = 120
TOOLKIT_FIX = ("install the NVIDIA container toolkit (package nvidia-container-toolkit), then `sudo nvidia-ctk"
               " runtime configure --runtime=docker && sudo systemctl restart docker`")


def docker_client() -> Any:
    """The Docker SDK's client (DOCKER_HOST or the default socket), or None when dockerd does not answer."""
    import docker
    import requests

    try:
        client = docker.from_env(timeout=PROBE_TIMEOUT_S)
        client.ping()
    except (docker.errors.DockerException, OSError, requests.RequestException):
        return None
    return client


def docker_facts(client: Any) -> list[Fact]:
    if client is None:
        return [Fact("docker", Status.FAIL, "dockerd does not answer (DOCKER_HOST or /var/run/docker.sock)",
                     "make docker (starts dockerd and gVisor where that is safe), or start the docker service")]
    info = client.info()
    facts = [Fact("docker", Status.PASS, f"server {info.get('ServerVersion', '?')}, root {info.get('DockerRootDir')}")]
    runtimes = sorted(info.get("Runtimes") or {})
    backend = os.environ.get(envs.VERI_LAUNCHER_PREFIX + "BACKEND") or "docker"
    if "runsc" in runtimes:
        facts.append(Fact("gVisor (runsc)", Status.PASS, f"a docker runtime ({', '.join(runtimes)})"))
    elif backend != "docker":
        facts.append(Fact("gVisor (runsc)", Status.INFO, f"not in docker; sandboxes run on {backend}"))
    else:
        facts.append(Fact("gVisor (runsc)", Status.FAIL, f"not a docker runtime (has: {', '.join(runtimes)}):"
                          " every rollout's sandbox runs under runsc", "make docker (installs runsc and registers"
                          " it with dockerd)"))
    return facts


def gpu_container_fact(client: Any, image: str | None, device_ids: list[str]) -> Fact:
    """A short container with compose's GPU device request (driver nvidia, these ids, capability gpu)
    runs `nvidia-smi -L`: the NVIDIA container runtime actually gives containers the GPUs."""
    if client is None:
        return Fact("GPU in a container", Status.FAIL, "not probed: dockerd does not answer", "start dockerd first")
    if image is None:
        return Fact("GPU in a container", Status.FAIL, "not probed: no local veri image to run it in",
                    "make images (or make images-gpu)")
    import docker
    import requests

    request = docker.types.DeviceRequest(driver="nvidia", device_ids=device_ids, capabilities=[["gpu"]])
    container = None
    try:  # created, started and removed here: a failed start must not leave a container behind
        container = client.containers.create(image, ["nvidia-smi", "-L"], entrypoint=[], device_requests=[request],
                                             network_mode="none", labels={"org.veri.doctor": "gpu-probe"})
        container.start()
        exit_code = container.wait(timeout=PROBE_TIMEOUT_S).get("StatusCode")
        output = container.logs(stdout=True, stderr=True).decode(errors="replace")
        if exit_code != 0:
            raise RuntimeError(output.strip() or f"nvidia-smi exited {exit_code}")
    except (docker.errors.DockerException, requests.RequestException, RuntimeError) as error:
        said = str(getattr(error, "explanation", None) or error).strip().splitlines()
        text = said[-1] if said else type(error).__name__
        return Fact("GPU in a container", Status.FAIL, f"a container with GPUs {','.join(device_ids)} did not"
                    f" start or saw none ({image}): {text}", TOOLKIT_FIX)
    finally:
        if container is not None:
            try:
                container.remove(force=True)
            except docker.errors.DockerException:  # already gone
                pass
    seen = [line for line in output.splitlines() if line.startswith("GPU ")]
    if len(seen) < len(device_ids):
        return Fact("GPU in a container", Status.FAIL, f"the container saw {len(seen)} of {len(device_ids)} GPUs",
                    TOOLKIT_FIX)
    return Fact("GPU in a container", Status.PASS, f"{len(seen)} GPU(s) in a container of {image}"
                " (compose's device request)")


def disk_fact(repo: Path, docker_root: str | None, *, gpu_images_missing: bool) -> Fact:
    need = MIN_FREE_GB + (GPU_IMAGES_GB if gpu_images_missing else 0)
    places = {str(repo): _free_gb(repo)}
    if docker_root and Path(docker_root).is_dir():
        places[docker_root] = _free_gb(Path(docker_root))
    found = ", ".join(f"{gb:.0f} GB free in {place}" for place, gb in places.items())
    short = [place for place, gb in places.items() if gb < need]
    if short:
        fix = ("docker image prune -f (untagged images); rm -rf build/state/jobs/<old job> (checkpoints);"
               " scripts/disk-check.sh says what else to remove")
        status = Status.FAIL if min(places.values()) < STOP_BELOW_GB else Status.WARN
        return Fact("disk", status, f"{found}: a first run needs about {need} GB"
                    + (" (the GPU images are not built yet)" if gpu_images_missing else ""), fix)
    return Fact("disk", Status.PASS, found)


def _free_gb(path: Path) -> float:
    return shutil.disk_usage(path).free / 1e9


def shm_fact(shm: Path = Path("/dev/shm"), *, gpus: int) -> Fact:
    try:
        stats = os.statvfs(shm)
    except OSError:
        return Fact("shared memory", Status.WARN, f"{shm} is missing", "mount a tmpfs on /dev/shm")
    size = stats.f_blocks * stats.f_frsize / GIB
    found = f"{shm}: {size:.1f} GiB"
    if gpus and size < MIN_SHM_GIB:
        return Fact("shared memory", Status.FAIL, f"{found}: vLLM's workers and NCCL share tensors through it"
                    " (the policy runs with ipc: host)", f"sudo mount -o remount,size=16G {shm}")
    return Fact("shared memory", Status.PASS, found)
