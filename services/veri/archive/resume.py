"""Checkpoints and resume: the checkpoint to continue from, and the archive lined up with it.

TRL saves checkpoints into output_dir/checkpoint-<global_step> (`save_steps`); trainer_state.json is
written last, so `latest_checkpoint` skips a folder without a readable one (a save cut short). The
steps a resume samples again are set aside by `JobArchive.discard_incomplete_steps` (see `writer`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from veri.archive.writer import JobArchive

CHECKPOINT_DIR = re.compile(r"^checkpoint-(\d+)$")
TRAINER_STATE = "trainer_state.json"


def latest_checkpoint(output_dir: Path) -> Path | None:
    """The highest output_dir/checkpoint-<N> that is complete (has a readable trainer_state.json)."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return None
    found = [(CHECKPOINT_DIR.match(p.name), p) for p in output_dir.iterdir() if p.is_dir()]
    for _, folder in sorted(((int(m.group(1)), p) for m, p in found if m), reverse=True):
        if _trainer_state(folder) is not None:
            return folder
    return None


def checkpoint_step(checkpoint: Path) -> int:
    """The global_step a checkpoint was saved at (trainer_state.json, else the folder's number)."""
    state = _trainer_state(Path(checkpoint)) or {}
    step = state.get("global_step")
    if isinstance(step, int):
        return step
    match = CHECKPOINT_DIR.match(Path(checkpoint).name)
    if not match:
        raise ValueError(f"{checkpoint} is not a checkpoint-<N> folder")
    return int(match.group(1))


def prepare_resume(archive: JobArchive, output_dir: Path) -> Path | None:
    """Line the archive up with the latest complete checkpoint; returns it (None: start from step 0).

    Pass the result to `trainer.train(resume_from_checkpoint=...)` (as str, or None)."""
    checkpoint = latest_checkpoint(output_dir)
    step = checkpoint_step(checkpoint) if checkpoint else 0
    discarded = archive.discard_incomplete_steps(after=step - 1)
    where = f"checkpoint {checkpoint}" if checkpoint else "no checkpoint: starting over"
    archive.log(f"resume from {where}; next step {step}; steps set aside: {discarded or 'none'}")
    return checkpoint


def _trainer_state(folder: Path) -> dict[str, Any] | None:
    try:
        state = json.loads((folder / TRAINER_STATE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None
