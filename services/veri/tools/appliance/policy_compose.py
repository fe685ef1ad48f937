"""The vLLM policy as compose services, generated from the job's plan (`backend: vllm`).

compose.yaml runs the CPU `hf` policy. A vLLM job gets an override file (`compose -f compose.yaml -f
<state>/compose.policy.yaml`) made here, once, from the plan `JobConfig.gpu_layout` made before
anything starts:
    policy, policy-1, ...  one `vllm serve` per server of the plan (GPU: one server, vLLM's own DP over
                           its GPUs; CPU: one server per replica), each seeing only its devices
    proxy                  waits for every policy server (the URLs it pins rollouts to come from
                           `veri stack-env`: VERI_POLICY_URLS, VERI_POLICY_DP_RANKS)
    trainer                the image with the vLLM stack's pins, its device, and the plan (VERI_GPU_PLAN)
Every server listens on 8001 in its own container, so `http://policy:8001` is the first replica for
either backend. Each holds what compose.yaml's hf policy holds (`least`: its x-least, read there by
`veri stack-env`): veri's uid, no capabilities, a read-only root with an executable /tmp (the kernels
torch compiles), and of the state folder only jobs/, read-only (the weights the filesystem sync writes).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from veri.core import envs, sampling
from veri.gpu.planner import GpuLayout, PolicyDevice, PolicyServer, WeightSync
from veri.services.policy.vllm import WORKER_EXTENSION  # the filesystem weight sync calls it through /collective_rpc

POLICY_PORT = 8001
# What TRL's `trl vllm-serve` adds for its client (trl/scripts/vllm_serve.py), minus generation knobs:
# logprobs after temperature scaling, as TRL's importance-sampling correction needs them. With
# sampling.SERVER_FLAGS: the model folder's generation_config.json sets no sampling default (core/sampling.py).
TRL_SERVER_FLAGS = ("--logprobs-mode", "processed_logprobs", "--max-logprobs", "-1")
NCCL_FLAGS = ("--weight-transfer-config", '{"backend": "nccl"}')
# The CPU twin: float32 like the trainer on CPU (served logprobs then match the trainer's), no CUDA
# graphs; 1 GiB of KV cache per server (the 2-core CI box runs two of them next to the trainer). No
# torch.compile either (TORCHDYNAMO_DISABLE): vLLM's sampler compiles a logprob-rank helper with inductor
# on the first request (C++ through g++), ~30 s of a 2-core box per server, while its first rollouts wait
# (measured: the first 8 requests 27-33 s with it, 0.8 s without; later ones alike).
CPU_FLAGS = ("--dtype", "float32", "--enforce-eager")
CPU_ENV = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
           "TORCHDYNAMO_DISABLE": "1"}
# How long a vLLM server may take to answer /health before compose's health checks count: the engine's
# start (torch.compile, CUDA graphs; the CPU twin on a shared 2-core box), a cold read of its weights,
# and each further TP rank's worker, NCCL setup and graph capture. Then HEALTH_RETRIES x HEALTH_INTERVAL_S
# more before the server is unhealthy and `make train` stops with its log (scripts/stack/policy_failed.sh).
START_BASE_S = {PolicyDevice.CUDA: 180, PolicyDevice.CPU: 300}
LOAD_GIB_PER_S = 0.2  # a cold, conservative disk read of the checkpoint (every rank reads its shard)
TP_RANK_S = 30
HEALTH_INTERVAL_S = 5
HEALTH_RETRIES = 60


@dataclass(frozen=True)
class PolicyImages:
    vllm: str  # the vLLM server image (veri/vllm on GPUs, veri/vllm-cpu on CPU)
    trainer: str  # the trainer image with the same TRL / transformers / vLLM pins


def images_for(plan: GpuLayout, prefix: str = "veri") -> PolicyImages:
    if plan.device == PolicyDevice.CPU:
        return PolicyImages(f"{prefix}/vllm-cpu", f"{prefix}/trainer-cpu")
    return PolicyImages(f"{prefix}/vllm", f"{prefix}/trainer-gpu")


def server_names(plan: GpuLayout) -> list[str]:
    return ["policy" if index == 0 else f"policy-{index}" for index in range(len(plan.policy_servers))]


def policy_urls(plan: GpuLayout) -> list[str]:
    """What the proxy and the trainer call, in the control network."""
    return [f"http://{name}:{POLICY_PORT}" for name in server_names(plan)]


@dataclass(frozen=True)
class Least:
    """What compose.yaml's policy holds of its x-least (user, capabilities, read-only root, tmpfs) and
    x-least-env (HOME and USER for that uid)."""

    service: dict[str, Any]
    environment: dict[str, str]


def compose_override(
    plan: GpuLayout, *, model: str, images: PolicyImages, least: Least, max_model_len: int | None = None,
    weights_gib: float | None = None,
) -> dict[str, Any]:
    """The override's services for `plan`; `model` is the model's path inside the containers, `weights_gib`
    its size (the health check's start period grows with it; None: unknown, the base period)."""
    services: dict[str, Any] = {}
    names = server_names(plan)
    start = start_period_s(plan, weights_gib)
    for name, server in zip(names, plan.policy_servers, strict=True):
        # `policy` is merged into compose.yaml's, which holds x-least already (its tmpfs list given
        # twice would mount /tmp twice); the others are new services
        hardening = Least({}, least.environment) if name == "policy" else least
        services[name] = _policy_service(plan, server, model=model, image=images.vllm, max_model_len=max_model_len,
                                         start_period=start, least=hardening)
    services["proxy"] = {"depends_on": {name: {"condition": "service_healthy"} for name in names}}
    services["trainer"] = _trainer_service(plan, images.trainer)
    return {"services": services}


def vllm_command(plan: GpuLayout, server: PolicyServer, *, model: str, max_model_len: int | None) -> list[str]:
    command = ["vllm", "serve", model, "--host", "0.0.0.0", "--port", str(POLICY_PORT), *server.vllm_args(),
               *TRL_SERVER_FLAGS, *sampling.SERVER_FLAGS, "--enable-prompt-tokens-details",
               "--worker-extension-cls", WORKER_EXTENSION]
    if plan.weight_sync == WeightSync.NCCL:
        command += NCCL_FLAGS
    if plan.device == PolicyDevice.CPU:
        command += CPU_FLAGS
    if max_model_len is not None:
        command += ["--max-model-len", str(max_model_len)]
    return command


def start_period_s(plan: GpuLayout, weights_gib: float | None) -> int:
    """Seconds before a vLLM server's failed health checks count: grows with the model and with TP."""
    base = START_BASE_S[plan.device]
    load = (weights_gib or 0) / LOAD_GIB_PER_S
    return int(base + load + TP_RANK_S * (plan.tensor_parallel_size - 1))


def _policy_service(
    plan: GpuLayout, server: PolicyServer, *, model: str, image: str, max_model_len: int | None, start_period: int,
    least: Least,
) -> dict[str, Any]:
    # VLLM_SERVER_DEV_MODE: /collective_rpc, /reset_prefix_cache, weight transfer
    environment = {**least.environment, "VLLM_SERVER_DEV_MODE": "1"}
    if plan.device == PolicyDevice.CPU:
        environment |= CPU_ENV
    service: dict[str, Any] = {
        **least.service,
        "image": image,
        "entrypoint": ["/usr/bin/tini", "--"],
        "command": vllm_command(plan, server, model=model, max_model_len=max_model_len),
        "environment": environment,
        # jobs/<job>/weights: what the filesystem sync (and `veri eval --step K`) loads
        "volumes": ["${VERI_MODELS_DIR:-./build/models}:/models:ro",
                    "${VERI_STATE_DIR:-./build/state}/jobs:/state/jobs:ro"],
        "networks": ["control"],
        "healthcheck": {
            "test": ["CMD", "python3", "-c",
                     f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{POLICY_PORT}/health')"],
            "interval": f"{HEALTH_INTERVAL_S}s", "timeout": "5s", "retries": HEALTH_RETRIES,
            "start_period": f"{start_period}s",
        },
        "stop_grace_period": "30s",
    }
    if plan.device == PolicyDevice.CUDA:
        service["deploy"] = _gpus(server.cuda_visible_devices)
        service["ipc"] = "host"  # vLLM's workers share tensors over /dev/shm (TP, DP)
    else:
        service["shm_size"] = "1g"  # vLLM's engine wants ~160 MiB of /dev/shm; docker gives 64 MiB
    return service


# The trainer's CUDA allocator grows segments instead of caching fixed blocks: measured on an H200
# (bench/device_check.py), a full fine-tune's step otherwise reserves up to 1.3x what it allocates, and
# a sleeping vLLM's GPU gets back only what empty_cache can release. Not for vLLM: its sleep mode's
# memory pool refuses expandable segments.
TRAINER_CUDA_ALLOC_CONF = "expandable_segments:True"


def _trainer_service(plan: GpuLayout, image: str) -> dict[str, Any]:
    environment = {envs.VERI_GPU_PLAN: plan.to_json()}
    service: dict[str, Any] = {"image": image, "environment": environment}
    if plan.trainer_gpu is not None:
        service["deploy"] = _gpus(plan.trainer_cuda_visible_devices)
        environment[envs.PYTORCH_CUDA_ALLOC_CONF] = TRAINER_CUDA_ALLOC_CONF
    return service


def _gpus(device_ids: str) -> dict[str, Any]:
    """Only these GPUs are visible in the container (compose's device reservation, NVIDIA runtime)."""
    devices = [{"driver": "nvidia", "device_ids": device_ids.split(","), "capabilities": ["gpu"]}]
    return {"resources": {"reservations": {"devices": devices}}}


def dump(override: dict[str, Any]) -> str:
    """YAML is a superset of JSON: compose reads this as it is, with no YAML writer's quoting rules."""
    return json.dumps(override, indent=2) + "\n"
