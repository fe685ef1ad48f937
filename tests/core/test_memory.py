"""The planner knows memory (docs/gpu.md, "Memory: what fits"): the trainer's estimate on GPU 0 and the policy's per
GPU, from the model's config.json (tests/core/models: Qwen3 4B, 8B and 32B shapes, no weights) and the job's knobs; a
plan that cannot fit is refused with the knob that makes it fit. `veri validate` reads the GPUs through a stand-in
nvidia-smi."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import nvidia_smi
from veri.core.config import parse_config, read_config_file
from veri.gpu.job import plan_job
from veri.gpu.memory import GIB, ModelShape, TrainingSetup, activation_bytes, trainer_estimate
from veri.gpu.planner import GpuInventory, LayoutError, model_facts, plan_layout

REPO = Path(__file__).resolve().parents[2]
MODELS = Path(__file__).parent / "models"
GIB_OF = {size: mib / 1024 for size, mib in nvidia_smi.MEMORY_MIB.items()}  # 24 GB -> 22.5 GiB, ...
BF16 = {"model_init_kwargs": {"dtype": "bfloat16"}}


def job(model: str, **knobs: Any) -> Any:
    """The shipped GPU job with another model and knobs (`grpo` merged into its section)."""
    raw = read_config_file(REPO / "config/url_extract.yaml")
    raw["model"] = str(MODELS / model)
    raw["grpo"] = {**raw["grpo"], **knobs.pop("grpo", {})}
    return parse_config({**raw, **knobs}, base_dir=REPO)


# (model, GPUs, GB each, knobs) -> None: fits, or (the knob at fault, a piece of the fix)
TABLE = [
    ("qwen3-4b", 1, 24, {"vllm_gpu_memory_utilization": 0.5, "vllm_sleep_mode": True, "max_model_len": 8192},
     ("lora_rank", "lora_rank: 64")),  # full fine-tune: ~74 GiB
    ("qwen3-4b", 1, 24, {"vllm_gpu_memory_utilization": 0.5, "vllm_sleep_mode": True, "max_model_len": 8192,
                         "lora_rank": 64, "grpo": {**BF16, "per_device_train_batch_size": 2}}, None),
    ("qwen3-4b", 1, 24, {"max_model_len": 8192, "lora_rank": 64},  # vLLM's 0.85 leaves the trainer 3 GiB
     ("grpo", "vllm_sleep_mode: true`; `vllm_gpu_memory_utilization: 0.5`")),
    ("qwen3-4b", 1, 24, {"vllm_gpu_memory_utilization": 0.3, "max_model_len": 8192},  # weights > 0.3 x 22.5
     ("vllm_gpu_memory_utilization", "vllm_gpu_memory_utilization: 0.5")),
    ("qwen3-4b", 2, 80, {}, None),  # the shipped job: full fine-tune on GPU 0 alone
    ("qwen3-4b", 2, 48, {}, ("lora_rank", "lora_rank: 64")),
    ("qwen3-4b", 2, 80, {"grpo": {"gradient_checkpointing": False}},
     ("grpo", "gradient_checkpointing: true")),
    ("qwen3-8b", 4, 80, {}, ("lora_rank", "lora_rank: 64")),  # 8 B/param x 2 + AdamW: ~140 GiB
    ("qwen3-8b", 4, 80, {"lora_rank": 64}, None),
    ("qwen3-32b", 8, 141, {"lora_rank": 64}, ("grpo", "model_init_kwargs: {dtype: bfloat16}")),
    ("qwen3-32b", 8, 141, {"lora_rank": 64, "grpo": BF16}, None),
    ("qwen3-32b", 8, 141, {"lora_rank": 64, "grpo": BF16, "max_model_len": None}, None),  # 40k positions
    ("qwen3-32b", 2, 48, {"lora_rank": 64, "grpo": BF16},  # 61 GiB of weights on the one policy GPU
     ("model", "larger GPUs")),
]


@pytest.mark.parametrize(("model", "gpus", "size", "knobs", "refused"), TABLE)
def test_plans_that_fit_and_plans_refused_with_the_fix(model, gpus, size, knobs, refused):
    config = job(model, **knobs)
    inventory = GpuInventory.nvidia(gpus, GIB_OF[size])
    if refused is None:
        plan = plan_job(config, inventory)
        notes = "\n".join(plan.notes)
        assert "trainer memory on GPU 0: ~" in notes and "policy memory: ~" in notes
        return
    with pytest.raises(LayoutError) as caught:
        plan_job(config, inventory)
    knob, fix = refused
    assert (caught.value.knob, fix in caught.value.fix) == (knob, True), caught.value


def test_the_estimate_adds_up_from_the_models_shape():
    facts = model_facts(MODELS / "qwen3-4b")
    assert facts.parameters == pytest.approx(4.02e9, rel=0.01)  # Qwen3-4B's 4.02B (tied embeddings)
    shape = facts.shape
    assert isinstance(shape, ModelShape) and (shape.layers, shape.kv_heads, shape.head_dim) == (36, 8, 128)
    full = dict(trainer_estimate(facts.parameters, shape, TrainingSetup()).parts)
    # float32: 4 bytes of weights, 8 of AdamW's two states; the batch's activations outweigh the gradients,
    # which grow only as the activations are freed (one or the other is held at the peak, not both)
    assert (full["weights"], full["AdamW"]) == pytest.approx((4 * facts.parameters / GIB, 8 * facts.parameters / GIB))
    assert "gradients" not in full and full["activations"] > full["weights"]
    short = dict(trainer_estimate(facts.parameters, shape, TrainingSetup(batch_size=1, sequence_length=1024)).parts)
    assert "activations" not in short and short["gradients"] == pytest.approx(4 * facts.parameters / GIB)
    lora = dict(trainer_estimate(facts.parameters, shape, TrainingSetup(lora_rank=64, weight_bytes=2)).parts)
    assert lora["frozen weights"] == pytest.approx(2 * facts.parameters / GIB)
    assert 1.5 < lora["LoRA + grads + AdamW"] < 2.5  # 132M adapter parameters x 16 bytes
    with_checkpoints = activation_bytes(shape, TrainingSetup())
    without = activation_bytes(shape, TrainingSetup(gradient_checkpointing=False))
    assert without > 5 * with_checkpoints  # every layer's tensors, not two blocks' plus the layer inputs
    assert activation_bytes(shape, TrainingSetup(batch_size=4)) == pytest.approx(with_checkpoints / 2)
    # float32 weights keep a float32 residual stream under bf16 autocast: twice the layer inputs of bf16 ones
    layer_inputs = shape.layers * shape.hidden * 8 * (4096 + 1024)
    assert with_checkpoints - activation_bytes(shape, TrainingSetup(weight_bytes=2)) == pytest.approx(2 * layer_inputs)
    # the KV cache per token: K and V x 36 layers x 8 heads x 128 x 2 bytes, split over TP
    assert (shape.kv_bytes_per_token(), shape.kv_bytes_per_token(tp=2)) == (147456, 73728)


# One GRPO step on an H200 (bench/device_check.py, 2026-12-04, expandable segments, docs/gpu.md): Qwen3
# shape, mode (full: float32 weights as TRL loads them; lora: r 16, bfloat16 weights), completion tokens
# (+ a 1,024-token prompt, 8 rows, gradient checkpointing, bf16 autocast) -> the GiB the step took of the
# GPU (the allocator's peak reservation + the CUDA context)
MEASURED_ON_H200 = [
    ("qwen3-4b", "full", 4096, 74.0), ("qwen3-4b", "lora", 4096, 26.3),
    ("qwen3-4b", "full", 8192, 91.9), ("qwen3-4b", "lora", 8192, 40.4),
    ("qwen3-8b", "full", 4096, 137.6), ("qwen3-8b", "lora", 4096, 41.5), ("qwen3-8b", "lora", 8192, 61.4),
    ("qwen3-1.7b", "full", 4096, 37.5), ("qwen3-1.7b", "lora", 4096, 15.7),
    ("qwen3-1.7b", "full", 8192, 50.4), ("qwen3-1.7b", "lora", 8192, 25.1),
    ("qwen3-0.6b", "full", 4096, 16.8), ("qwen3-0.6b", "lora", 4096, 8.3),
    ("qwen3-0.6b", "full", 8192, 23.6), ("qwen3-0.6b", "lora", 8192, 13.2),
]


@pytest.mark.parametrize(("model", "mode", "completion", "measured"), MEASURED_ON_H200)
def test_the_trainer_estimate_is_within_15_percent_of_a_real_step(model: str, mode: str, completion: int,
                                                                    measured: float):
    facts = model_facts(MODELS / model)
    assert facts.parameters is not None and facts.shape is not None
    setup = TrainingSetup(sequence_length=1024 + completion, lora_rank=16 if mode == "lora" else None,
                          weight_bytes=2 if mode == "lora" else 4)
    estimate = trainer_estimate(facts.parameters, facts.shape, setup).total_gib
    assert 0.95 <= estimate / measured <= 1.15, f"{model} {mode} {completion}: estimate {estimate:.1f} GiB"


def test_the_policys_kv_cache_must_hold_max_model_len():
    facts = model_facts(MODELS / "qwen3-4b")  # 262,144 positions
    training = TrainingSetup(lora_rank=64, weight_bytes=2, batch_size=2)
    with pytest.raises(LayoutError) as caught:  # the model's own length: ~36 GiB of KV cache
        plan_layout(GpuInventory.nvidia(2, GIB_OF[24]), facts, training=training)
    assert caught.value.knob == "max_model_len" and "max_model_len: " in caught.value.fix
    fitting = caught.value.fix.split("max_model_len: ")[1].split("`")[0]
    plan = plan_layout(GpuInventory.nvidia(2, GIB_OF[24]), facts,
                       training=TrainingSetup(lora_rank=64, weight_bytes=2, batch_size=2,
                                              max_model_len=int(fitting)))
    assert any("policy memory" in note for note in plan.notes)


def test_without_a_memory_figure_the_plan_says_what_it_could_not_estimate():
    plan = plan_job(job("qwen3-4b"), GpuInventory.nvidia(2))
    assert any("memory: not estimated (the GPU memory" in note for note in plan.notes)


def test_the_shipped_jobs_say_which_gpus_they_fit():
    gpu_job = parse_config(read_config_file(REPO / "config/url_extract.yaml"), base_dir=REPO)
    small = parse_config(read_config_file(REPO / "config/url_extract_24gb.yaml"), base_dir=REPO)
    as_4b = [config.model_copy(update={"model": MODELS / "qwen3-4b"}) for config in (gpu_job, small)]
    for gpus, size in ((2, 80), (4, 80), (8, 80), (2, 141), (8, 141)):
        plan_job(as_4b[0], GpuInventory.nvidia(gpus, GIB_OF[size]))
    for gpus, size in ((1, 24), (4, 24), (1, 80), (2, 48)):
        with pytest.raises(LayoutError):
            plan_job(as_4b[0], GpuInventory.nvidia(gpus, GIB_OF[size]))
    plan_job(as_4b[1], GpuInventory.nvidia(1, GIB_OF[24]))
    plan_job(as_4b[1], GpuInventory.nvidia(1, 24.0))  # an RTX 4090's 24,564 MiB


def _validate(tmp_path: Path, config: Path, devices: list[nvidia_smi.Gpu]) -> subprocess.CompletedProcess[str]:
    raw = yaml.safe_load(config.read_text())
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text((MODELS / "qwen3-4b" / "config.json").read_text())
    (model / "tokenizer_config.json").write_text("{}")
    raw["model"] = str(model)
    job_file = tmp_path / config.name
    job_file.write_text(yaml.safe_dump(raw))
    smi = nvidia_smi.install(tmp_path / "bin", devices)
    env = {"PATH": f"{smi}:/usr/bin:/bin", "HOME": str(tmp_path), "TRL_EXPERIMENTAL_SILENCE": "1"}
    return subprocess.run([sys.executable, "-m", "veri.cli", "validate", str(job_file)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.needs("process")
def test_veri_validate_refuses_the_full_fine_tune_on_one_24gb_gpu_and_names_the_fix(tmp_path: Path):
    done = _validate(tmp_path, REPO / "config/url_extract.yaml", nvidia_smi.gpus(1, 24))
    assert done.returncode == 1, done.stdout + done.stderr
    problem = next(line for line in done.stdout.splitlines() if line.startswith("problem: "))
    assert "the trainer needs ~74" in problem and "2+ GPUs" in done.stdout, done.stdout
    variant = _validate(tmp_path, REPO / "config/url_extract_24gb.yaml", nvidia_smi.gpus(1, 24))
    assert variant.returncode == 0, variant.stdout + variant.stderr
    assert "trainer memory on GPU 0: ~" in variant.stdout


def test_veri_layout_estimates_with_the_trainers_flags(capsys: pytest.CaptureFixture[str]):
    from veri.cli import main

    model = str(MODELS / "qwen3-4b")
    base = ["layout", "--gpus", "1", "--gpu-memory-gb", "22.5", "--model", model, "--max-model-len", "8192",
            "--gpu-memory-utilization", "0.5", "--sleep-mode"]
    assert main(base) == 2
    assert "set `lora_rank: 64`" in capsys.readouterr().err
    assert main([*base, "--lora-rank", "64", "--train-dtype", "bfloat16", "--batch-size", "2"]) == 0
    assert "trainer memory on GPU 0: ~16.0 GiB" in capsys.readouterr().out


def test_every_memory_problem_is_named_at_once(capsys: pytest.CaptureFixture[str]):
    """The KV cache that cannot hold the model's 262,144 positions and the trainer that needs ~74 GiB of a
    24 GB GPU, in one run: a user fixing one problem per run would need three runs."""
    from veri.cli import main

    assert main(["layout", "--gpus", "2", "--gpu-memory-gb", "24", "--model", str(MODELS / "qwen3-4b")]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2, lines
    assert "KV cache" in lines[0] and "`max_model_len: " in lines[0]
    assert "the trainer needs ~74" in lines[1] and "lora_rank: 64" in lines[1]
    config = job("qwen3-4b", max_model_len=None)
    with pytest.raises(LayoutError) as caught:
        plan_job(config, GpuInventory.nvidia(2, GIB_OF[24]))
    assert [error.knob for error in caught.value.each()] == ["max_model_len", "lora_rank"]
