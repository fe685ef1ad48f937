"""The deterministic tiny test model: a 2-layer random Qwen3 with a small Qwen3-style tokenizer.

Every run on every machine writes the same bytes: the tokenizer is trained on a seeded generated
corpus and the weights come from seeded integer draws. Tests, the CPU demo and `make tiny-model` share
it, so a Qwen3 chat template, Qwen3's special tokens and a 32k context make it a stand-in for a real
Qwen3 policy in every path that does not depend on what the model says.
"""

from __future__ import annotations

import json
from pathlib import Path

from veri.tools.models.corpus import corpus
from veri.tools.models.folder import write_model_folder

CHAT_TEMPLATE = Path(__file__).with_name("qwen3_chat_template.jinja")
VOCAB_SIZE = 6000
SEED = 0
# Qwen3's conventions: the turn markers are special (dropped by skip_special_tokens), the tool and
# think markers are plain added tokens so a decode keeps them for the parsers.
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
PLAIN_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
# Uniform on [-BOUND, BOUND] has std ~0.02, transformers' usual initializer_range.
BOUND = 0.035
LEVELS = 2**15


HEAD_DIM = 16
# vLLM's CPU attention kernels take head sizes 32..512: the vLLM CPU twin serves this variant
# (`veri model tiny-vllm`); same tokenizer, chat template and seeded-weight scheme.
VLLM_CPU_HEAD_DIM = 32


def build_tiny_model(out: Path, head_dim: int = HEAD_DIM) -> Path:
    """Write the tiny model folder at `out` (replacing an earlier one) and return its resolved path."""

    def fill(folder: Path) -> None:
        tokenizer = build_tokenizer()
        tokenizer.save_pretrained(folder)
        build_model(tokenizer, head_dim).save_pretrained(folder)

    return write_model_folder(out, "qwen3", fill)


def build_tokenizer():
    """A byte-level BPE tokenizer that loads as transformers' Qwen2Tokenizer, with Qwen3's tokens and template."""
    from tokenizers import AddedToken, Tokenizer, trainers
    from tokenizers.models import BPE
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import Qwen2Tokenizer

    # transformers 5 rebuilds a Qwen2Tokenizer's normalizer, pre-tokenizer and decoder from the class
    # on load, ignoring tokenizer.json's: train with exactly those, or AutoTokenizer ids would drift
    # from the raw tokenizer's.
    pipeline = Qwen2Tokenizer().backend_tokenizer
    bpe = Tokenizer(BPE())
    bpe.normalizer, bpe.pre_tokenizer, bpe.decoder = pipeline.normalizer, pipeline.pre_tokenizer, pipeline.decoder
    added = SPECIAL_TOKENS + PLAIN_TOKENS
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(added), initial_alphabet=ByteLevel.alphabet(), show_progress=False
    )
    bpe.train_from_iterator(corpus(SEED), trainer)
    model = json.loads(bpe.to_str())["model"]

    first_added = len(model["vocab"])
    tokenizer = Qwen2Tokenizer(
        vocab=model["vocab"],
        merges=[tuple(merge) for merge in model["merges"]],
        added_tokens_decoder={
            first_added + i: AddedToken(token, special=token in SPECIAL_TOKENS, normalized=False)
            for i, token in enumerate(added)
        },
        unk_token=None,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        extra_special_tokens=["<|im_start|>", "<|im_end|>"],
        errors="replace",
        model_max_length=32768,
        split_special_tokens=False,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE.read_text()
    return tokenizer


def build_model(tokenizer, head_dim: int = HEAD_DIM):
    """A 2-layer Qwen3ForCausalLM with seeded weights; 32k context, since a Claude Code request is ~12k tokens."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    endoftext, im_end = tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_end|>"])
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=head_dim,
        max_position_embeddings=32768,
        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
        tie_word_embeddings=True,
        bos_token_id=endoftext,
        eos_token_id=im_end,
        pad_token_id=endoftext,
        dtype="float32",
    )
    model = Qwen3ForCausalLM(config)
    # torch's normal_ runs different vectorised code on different CPUs; integer draws times one
    # constant are exact everywhere. Norm weights keep their constructor value of 1.
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for _, param in model.named_parameters():
            if param.dim() > 1:
                draws = torch.randint(-LEVELS, LEVELS + 1, param.shape, generator=generator)
                param.copy_(draws.to(torch.float32) * (BOUND / LEVELS))
    model.generation_config = GenerationConfig(
        bos_token_id=endoftext, eos_token_id=[im_end, endoftext], pad_token_id=endoftext
    )
    return model
