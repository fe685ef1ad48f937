"""`veri stack-env` for a vLLM job: the plan made once, the policy services generated from it, and what
the proxy and the trainer are told."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from testkit.trainer_jobs import write_job
from veri.core.config import parse_config
from veri.gpu.job import plan_job
from veri.gpu.planner import GpuInventory, GpuLayout
from veri.tools.appliance.policy_compose import compose_override, images_for, policy_urls
from veri.tools.appliance.stack_env import least_privilege, stack_env
from veri.tools.models.tiny import VLLM_CPU_HEAD_DIM, build_tiny_model

REPO = Path(__file__).resolve().parents[2]


def cpu_twin_job(folder: Path) -> Path:
    """config/url_extract_vllm_cpu.yaml with its model (tiny-vllm) built in `folder`."""
    model = build_tiny_model(folder / "models" / "tiny-vllm", head_dim=VLLM_CPU_HEAD_DIM)
    job = folder / "job.yaml"
    job.write_text((REPO / "config/url_extract_vllm_cpu.yaml").read_text().replace(
        "model: build/models/tiny-vllm", f"model: {model}"))
    return job


def test_the_cpu_twin_job_gets_two_vllm_servers_and_the_plan(tmp_path, monkeypatch):
    monkeypatch.delenv("IMAGE_PREFIX", raising=False)  # veri's own names
    values = stack_env(cpu_twin_job(tmp_path), tmp_path)
    base, override = values["COMPOSE_FILE"].split(":")
    assert base == "compose.yaml" and Path(override) == tmp_path / "compose.policy.yaml"
    services = json.loads(Path(override).read_text())["services"]
    assert set(services) == {"policy", "policy-1", "proxy", "trainer"}
    assert values["VERI_POLICY_URLS"] == "http://policy:8001,http://policy-1:8001"
    assert values["VERI_POLICY_DP_RANKS"] == "1"  # one server per replica: no rank header
    for name in ("policy", "policy-1"):
        command = services[name]["command"]
        assert services[name]["image"] == "veri/vllm-cpu" and command[:3] == ["vllm", "serve", "/models/tiny-vllm"]
        assert "--worker-extension-cls" in command and "--weight-transfer-config" not in command
        assert command[command.index("--dtype") + 1] == "float32"
        # the model folder's generation_config.json sets no sampling default (core/sampling.py)
        assert command[command.index("--generation-config") + 1] == "vllm"
        assert "deploy" not in services[name]  # no GPU
    assert services["proxy"]["depends_on"] == {"policy": {"condition": "service_healthy"},
                                               "policy-1": {"condition": "service_healthy"}}
    plan = GpuLayout.from_json(services["trainer"]["environment"]["VERI_GPU_PLAN"])
    assert services["trainer"]["image"] == "veri/trainer-cpu"
    assert "PYTORCH_CUDA_ALLOC_CONF" not in services["trainer"]["environment"]  # no CUDA allocator on CPU
    assert plan == GpuLayout.from_json(values["VERI_GPU_PLAN"]) and plan.data_parallel_size == 2


def test_the_vllm_images_follow_image_prefix(tmp_path, monkeypatch):
    """As the runtime and harness images do (mk/stack.mk): `make train` builds <prefix>/vllm-cpu, and the
    stack must run that one."""
    monkeypatch.setenv("IMAGE_PREFIX", "mirror.local/veri")
    services = json.loads(Path(stack_env(cpu_twin_job(tmp_path), tmp_path)["COMPOSE_FILE"].split(":")[1])
                          .read_text())["services"]
    assert {services[name]["image"] for name in ("policy", "policy-1")} == {"mirror.local/veri/vllm-cpu"}
    assert services["trainer"]["image"] == "mirror.local/veri/trainer-cpu"


def test_every_vllm_server_holds_what_compose_yaml_s_policy_holds(tmp_path):
    """compose.yaml's x-least on each server: `policy` gets it by merging into compose.yaml's policy (a
    tmpfs given twice would mount /tmp twice), policy-1 in full; of the state folder, jobs/ read-only."""
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    least = compose["x-least"]
    assert least["user"] != "0:0" and least["cap_drop"] == ["ALL"] and least["read_only"] is True
    values = stack_env(cpu_twin_job(tmp_path), tmp_path)
    services = json.loads(Path(values["COMPOSE_FILE"].split(":")[1]).read_text())["services"]
    hf_policy = {key: compose["services"]["policy"][key] for key in least}
    assert hf_policy == {**least, "tmpfs": ["/tmp:exec"]}  # torch's compiled kernels load from /tmp
    assert {key: services["policy-1"][key] for key in least} == hf_policy
    assert not set(least) & set(services["policy"])
    for name in ("policy", "policy-1"):
        assert services[name]["environment"]["HOME"] == compose["x-least-env"]["HOME"]
        assert services[name]["volumes"] == ["${VERI_MODELS_DIR:-./build/models}:/models:ro",
                                             "${VERI_STATE_DIR:-./build/state}/jobs:/state/jobs:ro"]


def test_an_hf_job_keeps_the_base_stack(tmp_path):
    values = stack_env(REPO / "config/url_extract_tiny.yaml", tmp_path)
    assert values["COMPOSE_FILE"] == "compose.yaml" and values["VERI_POLICY_URLS"] == ""
    assert not (tmp_path / "compose.policy.yaml").exists()


def test_four_gpus_one_server_with_vllm_dp_and_devices_per_container(tiny_model, tmp_path):
    raw = yaml.safe_load(write_job(tmp_path, tiny_model, backend="vllm", vllm_data_parallel_size=3,
                                   vllm_tensor_parallel_size=1).read_text())
    config = parse_config(raw, base_dir=tmp_path)
    plan = plan_job(config, GpuInventory.nvidia(4))
    override = compose_override(plan, model="/models/tiny", images=images_for(plan), least=least_privilege())
    services = override["services"]
    assert set(services) == {"policy", "proxy", "trainer"} and policy_urls(plan) == ["http://policy:8001"]
    policy, trainer = services["policy"], services["trainer"]
    assert policy["image"] == "veri/vllm" and trainer["image"] == "veri/trainer-gpu"
    devices = policy["deploy"]["resources"]["reservations"]["devices"][0]
    assert devices["device_ids"] == ["1", "2", "3"] and devices["capabilities"] == ["gpu"]
    assert trainer["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] == ["0"]
    # the GPU trainer's allocator grows segments (measured on an H200: docs/gpu.md); vLLM's sleep mode refuses them
    assert trainer["environment"]["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert "PYTORCH_CUDA_ALLOC_CONF" not in policy.get("environment", {})
    command = policy["command"]
    assert command[command.index("--data-parallel-size") + 1] == "3"
    assert command[command.index("--weight-transfer-config") + 1] == '{"backend": "nccl"}'  # TRL's NCCL sync
    assert command[command.index("--generation-config") + 1] == "vllm"


def test_model_only_needs_no_model_folder(tmp_path):
    """`make train` asks where the model lives before building it: nothing is planned or written yet."""
    job = tmp_path / "job.yaml"
    job.write_text((REPO / "config/url_extract_vllm_cpu.yaml").read_text().replace(
        "model: build/models/tiny-vllm", f"model: {tmp_path / 'models' / 'tiny-vllm'}"))
    values = stack_env(job, tmp_path / "state", model_only=True)
    assert values == {"VERI_MODELS_DIR": str(tmp_path / "models"), "VERI_MODEL": "tiny-vllm"}
    assert not (tmp_path / "state").exists()


def test_the_health_checks_start_period_grows_with_the_model_and_tp():
    from veri.gpu.planner import ModelFacts, plan_layout
    from veri.tools.appliance.policy_compose import HEALTH_INTERVAL_S, HEALTH_RETRIES, START_BASE_S

    heads = ModelFacts(32, 8, parameters=None)

    def period(gpus: int, weights_gib: float | None, tp: int | None = None) -> int:
        plan = plan_layout(GpuInventory.nvidia(gpus), heads, tensor_parallel_size=tp)
        service = compose_override(plan, model="/models/m", images=images_for(plan), least=least_privilege(),
                                   weights_gib=weights_gib)
        health = service["services"]["policy"]["healthcheck"]
        assert (health["interval"], health["retries"]) == (f"{HEALTH_INTERVAL_S}s", HEALTH_RETRIES)
        return int(health["start_period"].removesuffix("s"))

    small, large = period(2, 7.5), period(2, 130.0)
    assert period(2, None) == START_BASE_S[plan_layout(GpuInventory.nvidia(2), heads).device]
    assert START_BASE_S["cuda"] < small < large and large > 10 * 60  # a 70B's cold read takes minutes
    assert period(5, 130.0, tp=4) > period(5, 130.0, tp=1)  # every further rank starts its own worker
