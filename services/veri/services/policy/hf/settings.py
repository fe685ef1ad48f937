"""Settings of one `veri serve policy` (hf backend) process. `create_app` takes them as its argument."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field


def default_threads() -> int:
    """Torch intra-op threads: all cores but one, at most 8.

    The spare core is for the event loop and whatever shares the box (proxy, trainer): an OpenMP team
    with a thread that cannot get a core stalls every op (measured on 2 busy cores: a tiny-model decode
    step takes ~1 ms with 1 thread, ~15 ms with 2). Past 8, small-batch decode of a small model gains nothing.
    """
    return max(1, min(len(os.sched_getaffinity(0)) - 1, 8))


class PolicySettings(BaseModel):
    model_dir: Path
    served_model_name: str | None = Field(default=None, description="model id in the API; default: --model as given")
    host: str = "127.0.0.1"
    port: int = 8001
    dtype: Literal["float32", "bfloat16"] = "float32"
    threads: int = Field(default_factory=default_threads, ge=1)
    max_batch_rows: int = Field(default=64, ge=1, description="rows (prompt x n) decoded together at most")
    max_logprobs: int = Field(default=20, ge=0, description="largest `logprobs` a request may ask for (vLLM's cap)")
    scripted_replies: Path | None = Field(default=None, description="test-only: teacher-forced replies (scripted.py)")
    token: str | None = Field(default=None, description="bearer token of POST /update_weights (None: loopback "
                                                        "clients only); the stack's VERI_CONTROL_TOKEN")

    @property
    def model_name(self) -> str:
        return self.served_model_name or str(self.model_dir)
