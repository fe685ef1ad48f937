"""veri/vllm (= veri/trainer-gpu), the GPU path's image, checked where no GPU is: what it holds is what the
pins say, torch is a CUDA build, veri's worker extension imports (the policy loads it), vLLM's own
parser accepts the exact `vllm serve` commands veri generates for GPU plans, and the CLIs start.

`make images-gpu-check` builds the image and runs this. Neither `make test` nor CI builds it: `make
vendor-gpu` downloads several GB of CUDA wheels per fresh clone, and CI has no GPU to run them; so
without the image these tests skip and say how to get it. The containers run with no network.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import docker
import pytest
import yaml
from packaging.version import Version

from testkit.trainer_jobs import write_job
from veri.core.config import parse_config
from veri.gpu.job import plan_job
from veri.gpu.pins import GPU_CONSTRAINTS, GPU_PINS
from veri.gpu.planner import GpuInventory
from veri.tools.appliance.policy_compose import vllm_command

PREFIX = os.environ.get("IMAGE_PREFIX", "veri")
IMAGE = f"{PREFIX}/vllm"
TRAINER = f"{PREFIX}/trainer-gpu"
# vLLM picks its platform when its parser is built: with no GPU it cannot, so the checks below select
# the CPU platform explicitly (vLLM's own switch for CPU-only CI on an accelerator wheel). The flags
# parsed are the same on every platform.
NO_GPU = {"VLLM_TARGET_DEVICE": "cpu"}

pytestmark = [pytest.mark.needs("vllm"), pytest.mark.slow]

PROBE = """
import importlib.metadata as m, json, sys, torch
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
from veri.services.trainer.gpu_stack import gpu_stack_problems
import veri.services.policy.vllm.worker as worker

packages, commands = json.loads(sys.argv[1])
parsed = []
for command in commands:  # ["vllm", "serve", MODEL, ...]: what vLLM's serve subcommand parses
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(command[2:])
    plain = (int, float, str, bool, type(None))
    parsed.append({k: v if isinstance(v, plain) else str(v) for k, v in vars(args).items()})
print(json.dumps({
    "versions": {p: m.version(p) for p in packages},
    "torch": torch.__version__, "cuda": torch.version.cuda,
    "nvidia": sorted(d.metadata["Name"] for d in m.distributions() if d.metadata["Name"].lower().startswith("nvidia")),
    "gpu_stack_problems": gpu_stack_problems(),
    "worker_extension": worker.WeightReloadExtension.__name__,
    "parsed": parsed,
}))
"""


@pytest.fixture(scope="module")
def client():
    try:
        client = docker.from_env(timeout=900)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure here means "no daemon"
        pytest.skip(f"no Docker daemon ({exc}); run `make docker`")
    try:
        client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        pytest.skip(f"image {IMAGE} is missing: `make images-gpu-check` builds and checks it (after `make vendor-gpu`,"
                    " online: several GB of CUDA wheels, which is why CI does not)")
    yield client
    client.close()


def run(client, *command: str, image: str = IMAGE) -> str:
    """The command's stdout+stderr in a throwaway container (no network, no GPU)."""
    return client.containers.run(image, list(command), remove=True, network_disabled=True, environment=NO_GPU,
                                 stdout=True, stderr=True).decode()


def gpu_commands(tiny_model: Path, tmp_path: Path) -> list[list[str]]:
    """veri's `vllm serve` command for a 4-GPU plan (TP 1 x DP 3, NCCL sync) and a 1-GPU one (shared GPU)."""
    commands = []
    for gpus, overrides in ((4, {"vllm_data_parallel_size": 3, "vllm_tensor_parallel_size": 1}), (1, {})):
        raw = yaml.safe_load(write_job(tmp_path / f"gpus-{gpus}", tiny_model, backend="vllm", **overrides).read_text())
        plan = plan_job(parse_config(raw, base_dir=tmp_path), GpuInventory.nvidia(gpus))
        [server] = plan.policy_servers
        commands.append(vllm_command(plan, server, model="/models/tiny", max_model_len=2048))
    return commands


@pytest.fixture(scope="module")
def probe(client, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    commands = gpu_commands(tiny_model, tmp_path_factory.mktemp("jobs"))
    output = run(client, "python3", "-c", PROBE, json.dumps([sorted(GPU_CONSTRAINTS), commands]))
    return {"commands": commands, **json.loads(output.strip().splitlines()[-1])}


def test_the_image_holds_the_pinned_versions(probe):
    found = probe["versions"]
    wrong = {name: found[name] for name, req in GPU_CONSTRAINTS.items()
             if not req.specifier.contains(Version(found[name]).public, prereleases=True)}
    assert wrong == {}, f"outside services/veri/gpu/stack/gpu-stack.txt: {wrong}"
    assert found["vllm"] == GPU_PINS["vllm"]  # vLLM's CUDA wheel itself, not the CPU twin's alias
    assert probe["gpu_stack_problems"] == []  # what `veri train` checks before a vLLM job


def test_torch_is_a_cuda_build(probe):
    assert Version(probe["torch"]).public == GPU_PINS["torch"] and "+cpu" not in probe["torch"]
    assert probe["cuda"] is not None and Version(probe["cuda"]).major >= 12, probe["cuda"]
    assert {"nvidia-nccl-cu13", "nvidia-cudnn-cu13"} <= set(probe["nvidia"])  # NCCL sync, cuDNN


def test_vllm_parses_the_commands_veri_generates(probe):
    """The exact flags veri's compose override passes (policy_compose.vllm_command) mean what veri meant."""
    multi, single = probe["parsed"]
    assert probe["worker_extension"] == "WeightReloadExtension"
    for parsed in (multi, single):
        assert parsed["worker_extension_cls"] == "veri.services.policy.vllm.worker.WeightReloadExtension"
        assert parsed["logprobs_mode"] == "processed_logprobs" and parsed["max_logprobs"] == -1
        assert parsed["generation_config"] == "vllm"  # vLLM's neutral sampling defaults, not the model folder's
        assert parsed["enable_prompt_tokens_details"] is True and parsed["max_model_len"] == 2048
        assert parsed["port"] == 8001 and parsed["model_tag"] == "/models/tiny"
    assert (multi["tensor_parallel_size"], multi["data_parallel_size"]) == (1, 3)
    assert "nccl" in str(multi["weight_transfer_config"])
    assert single["gpu_memory_utilization"] < 0.9 and single["weight_transfer_config"] is None  # filesystem sync


def test_the_clis_start(client):
    script = ("vllm serve --help=all | grep -c -- '--worker-extension-cls'"
              " && trl vllm-serve --help | grep -c -- '--tensor-parallel-size'"
              " && veri --help | head -1 && veri train --help | head -1")
    # A failing step (a CLI that does not start, a flag not listed) fails the container: ContainerError.
    lines = run(client, "bash", "-o", "pipefail", "-c", script).strip().splitlines()
    assert lines[-2].startswith("usage: veri ") and lines[-1].startswith("usage: veri train "), lines


def test_the_trainer_tag_is_the_same_image(client):
    try:
        trainer = client.images.get(TRAINER)
    except docker.errors.ImageNotFound:
        pytest.fail(f"{IMAGE} exists but {TRAINER} does not: `make images-gpu` tags both")
    assert trainer.id == client.images.get(IMAGE).id
