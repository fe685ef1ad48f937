"""The weights the hf policy server loads: LoRA merged under the base model's names, tied tensors once,
accepted by the server's own checks."""

from __future__ import annotations

import copy

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

from veri.services.policy.hf.weights import read_update
from veri.services.policy.weight_files import WEIGHTS_FILE, policy_state_dict, write_weights


def test_full_model_weights_are_accepted_by_the_policy_server(tiny_model, tmp_path):
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    path = write_weights(tmp_path, "step-000001", policy_state_dict(model))
    assert [p.name for p in path.iterdir()] == [WEIGHTS_FILE] and not list(tmp_path.glob(".*"))
    update = read_update(path, AutoModelForCausalLM.from_pretrained(tiny_model))
    name, tensor = next(iter(model.state_dict().items()))
    torch.testing.assert_close(update.tensors[name], tensor)


def test_lora_weights_are_merged_without_touching_the_adapter(tiny_model, tmp_path):
    base = AutoModelForCausalLM.from_pretrained(tiny_model)
    config = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM")
    model = get_peft_model(base, config)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.1)
    before = {k: v.clone() for k, v in model.state_dict().items()}

    state = policy_state_dict(model)

    merged = copy.deepcopy(model).merge_and_unload().state_dict()
    assert state.keys() <= merged.keys() and not any("lora" in k for k in state)
    for name, tensor in state.items():
        torch.testing.assert_close(tensor, merged[name], msg=name)
    initial = AutoModelForCausalLM.from_pretrained(tiny_model).state_dict()
    assert all(not torch.equal(state[n], initial[n]) for n in state if n.endswith("proj.weight"))
    after = model.state_dict()  # nothing was merged in place: the frozen base and the adapter are as they were
    assert all(torch.equal(after[k], v) for k, v in before.items())
    read_update(write_weights(tmp_path, "lora", state), AutoModelForCausalLM.from_pretrained(tiny_model))
