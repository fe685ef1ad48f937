"""Which weights an eval loads: a LoRA checkpoint merged over the base into full weights the hf server
takes, and a model folder outside the jobs folder staged as a copy."""

from __future__ import annotations

import torch
from safetensors.torch import load_file

from veri.core.config import JobConfig
from veri.loop.evals.checkpoints import Checkpoint, weights_to_load


def _config(model) -> JobConfig:
    return JobConfig.model_construct(model=model)


def test_a_lora_checkpoint_is_merged_into_full_weights(tiny_model, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model),
                           LoraConfig(r=4, target_modules=["q_proj"], init_lora_weights=False))
    adapter = tmp_path / "jobs" / "job" / "checkpoints" / "checkpoint-3"
    model.save_pretrained(adapter)
    checkpoint = Checkpoint(label="step-3", folder=adapter, job="job", step=3)
    assert checkpoint.is_adapter
    merged = weights_to_load(checkpoint, _config(tiny_model), tmp_path / "scratch", shared=tmp_path / "jobs")
    tensors = load_file(merged / "model.safetensors")
    base = load_file(tiny_model / "model.safetensors")
    assert set(tensors) == set(base)  # the base model's own names: what the hf server's update checks
    changed = [name for name in base if not torch.equal(base[name], tensors[name])]
    assert changed and all("q_proj" in name for name in changed)


def test_weights_outside_the_jobs_folder_are_staged_and_inside_are_used_as_they_are(tiny_model, tmp_path):
    outside = Checkpoint(label="base", folder=tiny_model, step=0)
    staged = weights_to_load(outside, _config(tiny_model), tmp_path / "scratch", shared=tmp_path)
    assert staged == tmp_path / "scratch" / "base" and (staged / "model.safetensors").is_file()
    inside = Checkpoint(label="base", folder=staged)
    assert weights_to_load(inside, _config(tiny_model), tmp_path / "other", shared=tmp_path) == staged
