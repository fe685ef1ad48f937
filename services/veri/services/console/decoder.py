"""Token ids -> text for the token and trajectory views, with the job's own tokenizer (its tokenizer.json,
read by the `tokenizers` library: no transformers import in the console). The job's model folder as the
trainer saw it comes first, then the final model in the job folder; without either, views show ids."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from veri.archive import ArchiveLayout


class TokenDecoder:
    def __init__(self, tokenizer: Tokenizer, source: Path) -> None:
        self.tokenizer = tokenizer
        self.source = source

    def pieces(self, ids: list[int]) -> list[str]:
        """Each id's own text (special tokens included)."""
        return self.tokenizer.decode_batch([[token] for token in ids], skip_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)


def job_decoder(layout: ArchiveLayout, info: dict[str, Any]) -> TokenDecoder | None:
    """The tokenizer of the job described by job.json `info` (None when no tokenizer.json can be read)."""
    candidates = [Path(info["model"])] if info.get("model") else []
    candidates.append(layout.model)
    for folder in candidates:
        file = folder / "tokenizer.json"
        decoder = _load(str(file)) if file.is_file() else None  # a file that appears later is still found
        if decoder is not None:
            return decoder
    return None


@functools.lru_cache(maxsize=8)
def _load(path: str) -> TokenDecoder | None:
    try:
        return TokenDecoder(Tokenizer.from_file(path), Path(path).parent)
    except Exception:  # noqa: BLE001 - missing, unreadable or not a tokenizer file: the view shows ids instead
        return None
