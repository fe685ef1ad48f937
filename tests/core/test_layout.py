"""The GPU layout planner, without GPUs: GPU 0 trains, the policy gets TP x DP of the rest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from veri.core.layout import GpuInventory, GpuVendor, LayoutError, attention_heads, plan_layout

# (GPUs, heads) -> auto TP: the largest power of two <= GPUs - 1 that divides the heads.
AUTO_TP = {
    2: {14: 1, 16: 1, 28: 1, 40: 1, 64: 1},
    3: {14: 2, 16: 2, 28: 2, 40: 2, 64: 2},
    4: {14: 2, 16: 2, 28: 2, 40: 2, 64: 2},
    5: {14: 2, 16: 4, 28: 4, 40: 4, 64: 4},
    8: {14: 2, 16: 4, 28: 4, 40: 4, 64: 4},
}
CASES = [(gpus, heads, tp) for gpus, row in AUTO_TP.items() for heads, tp in row.items()]


@pytest.mark.parametrize(("gpus", "heads", "tp"), CASES)
def test_auto_tensor_parallel(gpus: int, heads: int, tp: int):
    layout = plan_layout(GpuInventory.nvidia(gpus), heads)
    assert (layout.trainer_gpu, layout.tensor_parallel_size, layout.data_parallel_size) == (0, tp, 1)
    assert layout.policy_gpus == tuple(range(1, 1 + tp))
    assert layout.idle_gpus == tuple(range(1 + tp, gpus))
    assert bool(layout.notes) == bool(layout.idle_gpus)


def test_idle_gpus_are_reported_with_the_knob_that_uses_them():
    layout = plan_layout(GpuInventory.nvidia(4), 32)
    assert layout.idle_gpus == (3,)
    assert "vllm_data_parallel_size: 3" in layout.describe() and "idle GPUs: 3" in layout.describe()


def test_data_parallel_spends_the_rest_on_replicas():
    # The seed's example: 4 GPUs, vllm_data_parallel_size = 3 -> three TP=1 replicas, nothing idle.
    layout = plan_layout(GpuInventory.nvidia(4), 32, data_parallel_size=3)
    assert (layout.tensor_parallel_size, layout.data_parallel_size, layout.idle_gpus) == (1, 3, ())
    assert layout.replicas == [(1,), (2,), (3,)]
    layout = plan_layout(GpuInventory.nvidia(8), 32, data_parallel_size=2)
    assert (layout.tensor_parallel_size, layout.replicas, layout.idle_gpus) == (2, [(1, 2), (3, 4)], (5, 6, 7))


def test_explicit_sizes_are_used_when_they_fit():
    layout = plan_layout(GpuInventory.nvidia(8), 28, tensor_parallel_size=7, data_parallel_size=1)
    assert layout.policy_gpus == (1, 2, 3, 4, 5, 6, 7) and layout.idle_gpus == ()
    layout = plan_layout(GpuInventory.nvidia(8), 40, tensor_parallel_size=2, data_parallel_size=3)
    assert layout.replicas == [(1, 2), (3, 4), (5, 6)] and layout.idle_gpus == (7,)


@pytest.mark.parametrize(
    ("gpus", "heads", "tp", "dp", "expected"),
    [
        (8, 14, 4, None, "does not divide the model's 14 attention heads"),
        (4, 16, 4, None, "4 x 1 = 4 GPUs, but only 3 are free"),
        (5, 16, 2, 3, "2 x 3 = 6 GPUs, but only 4 are free"),
        (3, 16, None, 3, "vllm_data_parallel_size=3 needs at least 3 GPUs"),
    ],
)
def test_explicit_sizes_that_do_not_fit(gpus, heads, tp, dp, expected):
    with pytest.raises(LayoutError, match=expected) as raised:
        plan_layout(GpuInventory.nvidia(gpus), heads, tensor_parallel_size=tp, data_parallel_size=dp)
    assert raised.value.fix


@pytest.mark.parametrize(
    ("inventory", "expected"),
    [
        (GpuInventory(1), "1 GPU is not enough"),
        (GpuInventory(0, GpuVendor.NONE), "no NVIDIA GPU found"),
        (GpuInventory(4, GpuVendor.AMD), "AMD GPUs are not supported"),
        (GpuInventory(4, nodes=2), "multi-node jobs are not supported"),
        (GpuInventory(16), "16 GPUs visible"),
    ],
)
def test_machines_that_are_refused(inventory: GpuInventory, expected: str):
    with pytest.raises(LayoutError, match=expected) as raised:
        plan_layout(inventory, 32)
    assert raised.value.fix  # every refusal says what to do


def test_heads_come_from_the_model_config(tmp_path: Path, tiny_model: Path):
    assert attention_heads(tiny_model) == 4
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"num_attention_heads": 40}}))
    assert attention_heads(tmp_path) == 40
    with pytest.raises(LayoutError, match="cannot read"):
        attention_heads(tmp_path / "missing")
