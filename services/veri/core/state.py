"""Where the stack keeps its state on this machine, and so where jobs live: declared here, once.

    <state>/             VERI_STATE_DIR, else the checkout's build/state (mk/stack.mk's default too)
        control_token    the proxy's control token (`make up`)
        jobs/<name>/     a job's folder: what `make train NAME=...` and `veri train --name` write, and what
                         `veri eval --job`, `veri export sft`, `veri job ...` and the console read
        jobs/<job>.eval-*/   eval archives (`veri eval`), beside the jobs
        outputs/         what harnesses left (the launcher writes it)

Inside the stack's containers the same folders are /state/... (compose.yaml), and the commands that run
there are given them (`--output /state/jobs`). Outside the checkout (veri installed without one), the
default is build/state under the current directory.
"""

from __future__ import annotations

import os
from pathlib import Path

from veri.core import envs

CHECKOUT = Path(__file__).resolve().parents[3]  # an editable install: the repo (Makefile, build/)
STATE_IN_CHECKOUT = Path("build/state")  # mk/stack.mk: VERI_STATE_DIR ?= build/state
JOBS = "jobs"


def state_dir() -> Path:
    """The state folder: $VERI_STATE_DIR, else the checkout's build/state (wherever veri runs from)."""
    if given := os.environ.get(envs.VERI_STATE_DIR):
        return Path(given)
    return CHECKOUT / STATE_IN_CHECKOUT if (CHECKOUT / "Makefile").is_file() else STATE_IN_CHECKOUT


def jobs_dir(state: Path | None = None) -> Path:
    """Where job (and eval) folders live: <state>/jobs."""
    return (state or state_dir()) / JOBS


# For a command's help: where its default comes from.
JOBS_HELP = f"${envs.VERI_STATE_DIR}/{JOBS}, else the checkout's {STATE_IN_CHECKOUT}/{JOBS}: where make train writes"
