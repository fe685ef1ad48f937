"""Where the vendored inputs and the built trees live (one place, so vendor, build and the trees agree).

vendor/tasks/                        `veri tasks vendor` writes it (online), everything else only reads it
  apt/<host>/<path>                  Debian's signed indexes as the mirror serves them (InRelease, Packages.xz)
  debs/                              the .debs the Dockerfiles' `apt-get install` lines need (recommends on)
  wheels/                            the wheels of the Dockerfiles' `pip install` lines
  verifier/uv/                       PyPI's `uv` musllinux wheel (static uv/uvx)
  verifier/wheels/                   the wheels the test.sh lines name (`uvx --with X==V`, `pip install X==V`)
build/tasks/runtime/<image id>/      a bundle image's runtime tree (mounted read-only at /veri/rt)
build/tasks/tools/<hash>/            the verifier's tools (mounted read-only at /veri/tools)
build/tasks/staged/<hash>/           a task's tests/ and solution/, copied where the stack's launcher reads them
build/tasks/ is $VERI_TASKS_BUILD when set (the stack sets it: its launcher mounts it at the same path).
"""

from __future__ import annotations

import os
from pathlib import Path

from veri.core import envs

RUNTIME_MOUNT = "/veri/rt"
TOOLS_MOUNT = "/veri/tools"


def checkout_root() -> Path:
    """This checkout (the folder with pyproject.toml and services/), else the working directory."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "pyproject.toml").is_file() and (parent / "services").is_dir():
            return parent
    return Path.cwd()


def default_vendor_dir() -> Path:
    return checkout_root() / "vendor" / "tasks"


def default_build_dir() -> Path:
    given = os.environ.get(envs.VERI_TASKS_BUILD)
    return Path(given) if given else checkout_root() / "build" / "tasks"
