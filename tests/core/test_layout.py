"""The GPU layout planner, without GPUs: GPU 0 trains, the policy gets TP x DP of the rest; 1 GPU is
shared; `device: cpu` plans no GPU; the plan travels as JSON; `veri layout` prints it."""

from __future__ import annotations

import json
import math
import stat
from pathlib import Path

import pytest

from veri.cli import main as veri_main
from veri.gpu.planner import (
    AUTO,
    GpuInventory,
    GpuLayout,
    GpuVendor,
    LayoutError,
    ModelFacts,
    PolicyDevice,
    WeightSync,
    attention_heads,
    estimate_parameters,
    model_facts,
    plan_from_env,
    plan_layout,
    probe_gpus,
)

# (GPUs, heads) -> auto TP: the largest power of two <= GPUs - 1 that divides the heads.
AUTO_TP = {
    2: {14: 1, 16: 1, 28: 1, 40: 1, 64: 1},
    3: {14: 2, 16: 2, 28: 2, 40: 2, 64: 2},
    4: {14: 2, 16: 2, 28: 2, 40: 2, 64: 2},
    5: {14: 2, 16: 4, 28: 4, 40: 4, 64: 4},
    8: {14: 2, 16: 4, 28: 4, 40: 4, 64: 4},
}
CASES = [(gpus, heads, tp) for gpus, row in AUTO_TP.items() for heads, tp in row.items()]

QWEN3_4B = ModelFacts(32, 8, parameters=4_022_000_000)  # 4B, bf16: ~7.5 GiB of weights
LLAMA_70B = ModelFacts(32, 8, parameters=70_000_000_000)  # ~130 GiB: needs TP=4 on 80 GiB GPUs


@pytest.mark.parametrize(("gpus", "heads", "tp"), CASES)
def test_auto_tensor_parallel(gpus: int, heads: int, tp: int):
    layout = plan_layout(GpuInventory.nvidia(gpus), heads)
    assert (layout.trainer_gpu, layout.tensor_parallel_size, layout.data_parallel_size) == (0, tp, 1)
    assert layout.policy_gpus == tuple(range(1, 1 + tp))
    assert layout.idle_gpus == tuple(range(1 + tp, gpus))
    assert any("idle" in note for note in layout.notes) == bool(layout.idle_gpus)
    assert layout.weight_sync == WeightSync.NCCL


# GPUs -> (TP, DP, idle) for a 32-head / 8-KV-head 4B model on 24 GiB GPUs: default knobs, then `auto`.
ONE_TO_EIGHT = {
    1: ((1, 1, ()), (1, 1, ())),
    2: ((1, 1, ()), (1, 1, ())),
    3: ((2, 1, ()), (1, 2, ())),
    4: ((2, 1, (3,)), (1, 3, ())),
    5: ((4, 1, ()), (1, 4, ())),
    6: ((4, 1, (5,)), (1, 5, ())),
    7: ((4, 1, (5, 6)), (1, 6, ())),
    8: ((4, 1, (5, 6, 7)), (1, 7, ())),
}


@pytest.mark.parametrize("gpus", sorted(ONE_TO_EIGHT))
def test_one_to_eight_gpus(gpus: int):
    inventory = GpuInventory.nvidia(gpus, memory_gib=24)
    for dp, (tp, replicas, idle) in zip((None, AUTO), ONE_TO_EIGHT[gpus], strict=True):
        layout = plan_layout(inventory, QWEN3_4B, data_parallel_size=dp)
        assert (layout.tensor_parallel_size, layout.data_parallel_size, layout.idle_gpus) == (tp, replicas, idle)
        assert layout.trainer_gpu == 0 and len(layout.policy_gpus) == tp * replicas
        assert layout.weight_sync == (WeightSync.FILESYSTEM if gpus == 1 else WeightSync.NCCL)
        assert layout.shared == (gpus == 1)


def test_the_seeds_example_l4_x4_three_replicas():
    # L4-24GB x4, a 4B policy: vllm_data_parallel_size = 3 runs three TP=1 replicas, nothing idle; auto agrees.
    l4s = GpuInventory.nvidia(4, memory_gib=24)
    given = plan_layout(l4s, QWEN3_4B, data_parallel_size=3)
    auto = plan_layout(l4s, QWEN3_4B, data_parallel_size=AUTO)
    for layout in (given, auto):
        assert (layout.trainer_gpu, layout.replicas, layout.idle_gpus) == (0, [(1,), (2,), (3,)], ())
        assert layout.trainer_cuda_visible_devices == "0"
        [server] = layout.policy_servers  # one vLLM server, its own DP; the proxy pins ranks
        assert server.cuda_visible_devices == "1,2,3"
        assert server.vllm_args() == ["--tensor-parallel-size", "1", "--data-parallel-size", "3",
                                      "--gpu-memory-utilization", "0.9"]
    assert any("smallest power of two the model fits on" in note for note in auto.notes)


def test_a_70b_model_on_8_80gb_gpus():
    layout = plan_layout(GpuInventory.nvidia(8, memory_gib=80), LLAMA_70B, data_parallel_size=AUTO)
    assert (layout.tensor_parallel_size, layout.data_parallel_size) == (4, 1)
    assert layout.policy_gpus == (1, 2, 3, 4) and layout.idle_gpus == (5, 6, 7)
    assert "another replica needs TP=4 GPUs" in layout.describe()
    assert plan_layout(GpuInventory.nvidia(8, memory_gib=80), LLAMA_70B).tensor_parallel_size == 4


def test_auto_data_parallel_without_a_memory_figure_falls_back_and_says_so():
    layout = plan_layout(GpuInventory.nvidia(4), QWEN3_4B, data_parallel_size=AUTO)
    assert (layout.tensor_parallel_size, layout.data_parallel_size, layout.idle_gpus) == (2, 1, (3,))
    assert "needs the GPU memory" in layout.describe()
    unknown_size = plan_layout(GpuInventory.nvidia(4, 24), ModelFacts(32, 8), data_parallel_size=AUTO)
    assert unknown_size.data_parallel_size == 1 and "needs the model's size" in unknown_size.describe()
    given_tp = plan_layout(GpuInventory.nvidia(8), 16, tensor_parallel_size=2, data_parallel_size=AUTO)
    assert given_tp.replicas == [(1, 2), (3, 4), (5, 6)]  # TP given: the model fits on it, fill the rest


def test_a_model_too_big_for_any_tp_is_planned_with_a_warning():
    layout = plan_layout(GpuInventory.nvidia(8, 80), ModelFacts(32, 8, 400_000_000_000), data_parallel_size=AUTO)
    assert (layout.tensor_parallel_size, layout.data_parallel_size) == (4, 1)
    assert "warning: may not fit" in layout.describe()


@pytest.mark.parametrize(
    ("gpus", "heads", "kv_heads", "tp"),
    [
        (8, 32, 8, 4),  # 7 free: 8 would divide both, but does not fit
        (8, 16, 2, 2),  # the attention heads alone would allow 4
        (5, 12, 2, 2),
        (8, 28, 4, 4),  # Qwen2.5-7B
        (8, 40, 8, 4),
        (8, 14, 2, 2),
        (8, 24, 1, 1),  # multi-query attention: one KV head, TP 1
    ],
)
def test_tp_divides_both_head_counts(gpus: int, heads: int, kv_heads: int, tp: int):
    layout = plan_layout(GpuInventory.nvidia(gpus), ModelFacts(heads, kv_heads))
    assert (layout.attention_heads, layout.kv_heads, layout.tensor_parallel_size) == (heads, kv_heads, tp)


def test_idle_gpus_are_reported_with_the_knob_that_uses_them():
    layout = plan_layout(GpuInventory.nvidia(4), 32)
    assert layout.idle_gpus == (3,)
    assert "vllm_data_parallel_size: 3" in layout.describe() and "idle GPUs: 3" in layout.describe()


def test_data_parallel_spends_the_rest_on_replicas():
    layout = plan_layout(GpuInventory.nvidia(8), 32, data_parallel_size=2)
    assert (layout.tensor_parallel_size, layout.replicas, layout.idle_gpus) == (2, [(1, 2), (3, 4)], (5, 6, 7))


def test_explicit_sizes_are_used_when_they_fit():
    layout = plan_layout(GpuInventory.nvidia(8), 28, tensor_parallel_size=7, data_parallel_size=1)
    assert layout.policy_gpus == (1, 2, 3, 4, 5, 6, 7) and layout.idle_gpus == ()
    layout = plan_layout(GpuInventory.nvidia(8), 40, tensor_parallel_size=2, data_parallel_size=3)
    assert layout.replicas == [(1, 2), (3, 4), (5, 6)] and layout.idle_gpus == (7,)


@pytest.mark.parametrize(
    ("gpus", "model", "tp", "dp", "expected", "knob"),
    [
        (8, 14, 4, None, "does not divide the model's 14 attention heads", "vllm_tensor_parallel_size"),
        (8, ModelFacts(16, 2), 4, None, "16 attention heads and 2 KV heads", "vllm_tensor_parallel_size"),
        (4, 16, 4, None, "4 x 1 = 4 GPUs, but only 3 are free", "vllm_tensor_parallel_size"),
        (5, 16, 2, 3, "2 x 3 = 6 GPUs, but only 4 are free", "vllm_tensor_parallel_size"),
        (3, 16, None, 3, "vllm_data_parallel_size=3 needs at least 3 GPUs", "vllm_data_parallel_size"),
        (1, 16, 2, None, "with 1 GPU the policy runs TP=1 x DP=1", "vllm_tensor_parallel_size"),
        (1, 16, None, 2, "with 1 GPU the policy runs TP=1 x DP=1", "vllm_data_parallel_size"),
    ],
)
def test_explicit_sizes_that_do_not_fit(gpus, model, tp, dp, expected, knob):
    with pytest.raises(LayoutError, match=expected) as raised:
        plan_layout(GpuInventory.nvidia(gpus), model, tensor_parallel_size=tp, data_parallel_size=dp)
    assert raised.value.fix and raised.value.knob == knob
    if "KV heads" in expected:
        assert "[1, 2]" in raised.value.fix


@pytest.mark.parametrize(
    ("inventory", "expected"),
    [
        (GpuInventory(0, GpuVendor.NONE), "no NVIDIA GPU found"),
        (GpuInventory(4, GpuVendor.AMD), "AMD GPUs are not supported"),
        (GpuInventory(4, nodes=2), "multi-node jobs are not supported"),
        (GpuInventory(9), "9 GPUs visible"),
        (GpuInventory(16), "16 GPUs visible"),
    ],
)
def test_machines_that_are_refused(inventory: GpuInventory, expected: str):
    with pytest.raises(LayoutError, match=expected) as raised:
        plan_layout(inventory, 32)
    assert raised.value.fix  # every refusal says what to do
    if inventory.vendor == GpuVendor.NONE:
        assert "backend: hf" in raised.value.fix and "device: cpu" in raised.value.fix


def test_one_gpu_is_shared_with_filesystem_sync():
    layout = plan_layout(GpuInventory.nvidia(1, memory_gib=80), QWEN3_4B)
    assert layout.shared and (layout.trainer_gpu, layout.policy_gpus, layout.idle_gpus) == (0, (0,), ())
    assert (layout.weight_sync, layout.gpu_memory_utilization) == (WeightSync.FILESYSTEM, 0.3)
    assert layout.trainer_cuda_visible_devices == "0" and layout.policy_servers[0].cuda_visible_devices == "0"
    assert "vllm_sleep_mode: true would free" in layout.describe()
    assert "cannot connect two processes on one device" in layout.describe()
    assert plan_layout(GpuInventory.nvidia(1), 32, gpu_memory_utilization=0.4).gpu_memory_utilization == 0.4
    with pytest.raises(LayoutError, match="weight_sync: nccl needs the trainer and the policy on different GPUs"):
        plan_layout(GpuInventory.nvidia(1), 32, weight_sync=WeightSync.NCCL)


def test_sleep_mode_is_planned_for_one_shared_gpu_and_cpu_only():
    shared = plan_layout(GpuInventory.nvidia(1, memory_gib=80), QWEN3_4B, sleep_mode=True)
    assert shared.sleep_mode and shared.policy_servers[0].vllm_args()[-1] == "--enable-sleep-mode"
    assert "sleeps from the end of each step's rollouts" in shared.describe()
    assert GpuLayout.from_json(shared.to_json()) == shared
    assert "--enable-sleep-mode" not in plan_layout(GpuInventory.nvidia(1), 32).policy_servers[0].vllm_args()
    cpu = plan_layout(GpuInventory(0, GpuVendor.NONE), 16, data_parallel_size=2, device=PolicyDevice.CPU,
                      sleep_mode=True)
    assert cpu.sleep_mode and "frees no memory" in cpu.describe()
    # vLLM's CPU build refuses --enable-sleep-mode; its engine still pauses and resumes on /sleep, /wake_up
    assert all("--enable-sleep-mode" not in server.vllm_args() for server in cpu.policy_servers)
    with pytest.raises(LayoutError, match="the trainer has GPU 0 to itself") as raised:
        plan_layout(GpuInventory.nvidia(4), 32, sleep_mode=True)
    assert raised.value.knob == "vllm_sleep_mode" and "remove vllm_sleep_mode" in raised.value.fix


def test_filesystem_sync_can_be_forced_on_several_gpus():
    layout = plan_layout(GpuInventory.nvidia(4), 32, weight_sync=WeightSync.FILESYSTEM)
    assert layout.weight_sync == WeightSync.FILESYSTEM and not layout.shared
    assert plan_layout(GpuInventory.nvidia(4), 32, weight_sync=WeightSync.NCCL).weight_sync == WeightSync.NCCL


def test_cpu_device_plans_one_vllm_server_per_replica():
    nothing = GpuInventory(0, GpuVendor.NONE)
    layout = plan_layout(nothing, 16, data_parallel_size=2, device=PolicyDevice.CPU)
    assert (layout.device, layout.total_gpus, layout.trainer_gpu, layout.policy_gpus) == ("cpu", 0, None, ())
    assert layout.weight_sync == WeightSync.FILESYSTEM and layout.trainer_cuda_visible_devices == ""
    assert [server.cuda_visible_devices for server in layout.policy_servers] == ["", ""]
    assert layout.policy_servers[0].vllm_args() == ["--tensor-parallel-size", "1"]
    assert plan_layout(nothing, 16, data_parallel_size=AUTO, device=PolicyDevice.CPU).data_parallel_size == 1
    with pytest.raises(LayoutError, match="nccl needs GPUs"):
        plan_layout(nothing, 16, weight_sync=WeightSync.NCCL, device=PolicyDevice.CPU)
    with pytest.raises(LayoutError, match="TP=1"):
        plan_layout(nothing, 16, tensor_parallel_size=2, device=PolicyDevice.CPU)
    with pytest.raises(LayoutError, match="does nothing with device: cpu"):
        plan_layout(nothing, 16, gpu_memory_utilization=0.5, device=PolicyDevice.CPU)
    with pytest.raises(LayoutError, match="AMD"):  # `cuda` is not a way around the machine check
        plan_layout(GpuInventory(2, GpuVendor.AMD), 16, device=PolicyDevice.CUDA)


def test_devices_are_named_by_the_visible_ids():
    # CUDA_VISIBLE_DEVICES=2,3,5,7 on the host: plan indices 0..3 map back to those ids
    layout = plan_layout(GpuInventory(4, ids=("2", "3", "5", "7")), 32, data_parallel_size=3)
    assert layout.trainer_cuda_visible_devices == "2"
    assert layout.policy_servers[0].cuda_visible_devices == "3,5,7"


def test_the_plan_round_trips_through_json_and_the_environment():
    for layout in (
        plan_layout(GpuInventory.nvidia(8, 80), LLAMA_70B, data_parallel_size=AUTO),
        plan_layout(GpuInventory.nvidia(1), 32),
        plan_layout(GpuInventory(0, GpuVendor.NONE), 32, data_parallel_size=2, device=PolicyDevice.CPU),
    ):
        assert GpuLayout.from_json(layout.to_json()) == layout
        assert plan_from_env({"VERI_GPU_PLAN": layout.to_json()}) == layout
    with pytest.raises(LayoutError, match="VERI_GPU_PLAN is not set"):
        plan_from_env({})
    with pytest.raises(LayoutError, match="not a GPU plan"):
        GpuLayout.from_json('{"device": "cuda"}')
    with pytest.raises(LayoutError, match="not a GPU plan"):
        GpuLayout.from_json("not json")


# --- the model folder ------------------------------------------------------------------------------


def test_heads_come_from_the_model_config(tmp_path: Path, tiny_model: Path):
    assert attention_heads(tiny_model) == 4
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"num_attention_heads": 40}}))
    assert attention_heads(tmp_path) == 40
    assert model_facts(tmp_path).kv_heads == 40  # no num_key_value_heads: plain multi-head attention
    with pytest.raises(LayoutError, match="cannot read"):
        attention_heads(tmp_path / "missing")


def test_tiny_model_facts_count_the_safetensors_headers(tiny_model: Path):
    facts = model_facts(tiny_model)
    assert (facts.attention_heads, facts.kv_heads, facts.source) == (4, 2, "safetensors headers")
    config = json.loads((tiny_model / "config.json").read_text())
    estimate = estimate_parameters(config)
    assert estimate is not None and abs(estimate - facts.parameters) / facts.parameters < 0.01  # norms only
    assert facts.dtype_bytes == 2  # a float32 checkpoint is served in half precision


def test_model_size_from_headers_index_or_config(tmp_path: Path):
    config = {"num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096, "num_hidden_layers": 32,
              "vocab_size": 128256, "intermediate_size": 14336, "torch_dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    facts = model_facts(tmp_path)  # Llama-3-8B's shape, no weights here: estimated from the config
    assert facts.source == "estimated from config.json" and 7.9e9 < facts.parameters < 8.1e9
    _write_safetensors(tmp_path / "model-1.safetensors", {"a": [10, 20], "b": [5]})
    _write_safetensors(tmp_path / "model-2.safetensors", {"c": [3, 3]})
    _write_safetensors(tmp_path / "consolidated.safetensors", {"all": [214]})  # a duplicate copy, not a shard
    index = {"weight_map": {"a": "model-1.safetensors", "b": "model-1.safetensors", "c": "model-2.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    assert (model_facts(tmp_path).parameters, model_facts(tmp_path).source) == (214, "safetensors headers")
    (tmp_path / "model.safetensors.index.json").unlink()
    (tmp_path / "consolidated.safetensors").write_text("version https://git-lfs.github.com/spec/v1\n")
    assert model_facts(tmp_path).source == "estimated from config.json"  # an LFS pointer is not a header
    (tmp_path / "config.json").write_text(json.dumps({**config, "torch_dtype": "float8_e4m3fn"}))
    assert model_facts(tmp_path).dtype_bytes == 1


def _write_safetensors(path: Path, shapes: dict[str, list[int]]) -> None:
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = 2 * math.prod(shape)  # BF16
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + bytes(offset))


def test_probe_reads_names_memory_and_visible_devices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nfor i in 0 1 2 3; do echo \"NVIDIA L4, 23034\"; done\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("SLURM_JOB_NUM_NODES", raising=False)
    found = probe_gpus()
    assert (found.count, found.names[0], found.device_ids()) == (4, "NVIDIA L4", ("0", "1", "2", "3"))
    assert found.memory_gib == pytest.approx(22.49, abs=0.01)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert probe_gpus().device_ids() == ("3", "1")


# --- veri layout -----------------------------------------------------------------------------------


def test_cli_prints_the_plan(capsys: pytest.CaptureFixture[str]):
    argv = ["layout", "--gpus", "4", "--heads", "32", "--kv-heads", "8", "--params-b", "4", "--gpu-memory-gb", "24",
            "--dp", "auto"]
    assert veri_main(argv) == 0
    out = capsys.readouterr().out
    assert "trainer on GPU 0; policy (vLLM) TP=1 x DP=3 on GPUs 1,2,3" in out
    assert "idle GPUs: none" in out and "weight sync: nccl" in out and "smallest power of two" in out
    assert veri_main([*argv, "--json"]) == 0
    layout = GpuLayout.from_json(capsys.readouterr().out)
    assert (layout.tensor_parallel_size, layout.data_parallel_size, layout.idle_gpus) == (1, 3, ())


def test_cli_reads_the_model_folder(capsys: pytest.CaptureFixture[str], tiny_model: Path):
    assert veri_main(["layout", "--gpus", "1", "--model", str(tiny_model)]) == 0
    out = capsys.readouterr().out
    assert "share GPU 0" in out and "weight sync: filesystem" in out and "4 attention heads, 2 KV heads" in out


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--gpus", "1", "--heads", "16", "--weight-sync", "nccl"], "set weight_sync: filesystem"),
        (["--gpus", "0", "--heads", "16"], "backend: hf"),
        (["--gpus", "9", "--heads", "16"], "CUDA_VISIBLE_DEVICES"),
        (["--gpus", "4", "--heads", "16", "--tp", "3"], "use one of [1, 2]"),
        (["--gpus", "4", "--model", "/nonexistent"], "cannot read"),
        (["--gpus", "4", "--heads", "0"], "--heads 0 is not a valid count"),
    ],
)
def test_cli_refuses_bad_combinations_in_one_line(argv, expected, capsys: pytest.CaptureFixture[str]):
    assert veri_main(["layout", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and expected in captured.err and "fix:" in captured.err
    assert len(captured.err.strip().splitlines()) == 1
