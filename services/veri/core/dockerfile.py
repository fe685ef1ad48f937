"""A Dockerfile's `FROM` lines: the images a task's build starts from, and the same Dockerfile with them
mapped to local images (`veri tasks build --image-map`, a job's `image_map:`). Here, below every tier, so
`veri validate` can name a FROM that cannot be had offline before any build (validation/job_checks.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass

TASK_BASE = "veri/task-os-base"  # the Debian base an unreachable `FROM ubuntu:...` is usually mapped to
TASK_BASE_FROM = "veri/os-base"  # what `veri tasks build` makes TASK_BASE from, when it is missing


@dataclass(frozen=True)
class FromLine:
    index: int  # the line's index in the Dockerfile's lines
    image: str
    stage: str | None  # `AS name`


def from_lines(dockerfile: str) -> list[FromLine]:
    """The `FROM` lines (raw line indexes, for rewriting), `--platform=` skipped."""
    found = []
    for index, line in enumerate(dockerfile.splitlines()):
        words = line.split()
        if not words or words[0].upper() != "FROM":
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        if not args:
            continue
        stage = args[2] if len(args) >= 3 and args[1].upper() == "AS" else None
        found.append(FromLine(index, args[0], stage))
    return found


def base_images(dockerfile: str) -> list[str]:
    """The images the `FROM` lines pull: not `scratch`, not an earlier stage's name, not `$ARG`s."""
    stages: set[str] = set()
    images = []
    for line in from_lines(dockerfile):
        if line.image.lower() not in stages and line.image != "scratch" and line.image not in images:
            images.append(line.image)
        if line.stage:
            stages.add(line.stage.lower())
    return images


def map_from_lines(dockerfile: str, image_map: dict[str, str]) -> tuple[str, dict[str, str]]:
    """The Dockerfile with its `FROM` images replaced by image_map's (only those lines), and what was
    replaced. `name` in the map also matches `name:latest`."""
    lines = dockerfile.splitlines(keepends=True)
    applied: dict[str, str] = {}
    stages: set[str] = set()
    for line in from_lines(dockerfile):
        target = None if line.image.lower() in stages else lookup(image_map, line.image)
        if line.stage:
            stages.add(line.stage.lower())
        if target is None:
            continue
        lines[line.index] = re.sub(rf"(?<=\s){re.escape(line.image)}(?=\s|$)", target, lines[line.index], count=1)
        applied[line.image] = target
    return "".join(lines), applied


def lookup(image_map: dict[str, str], image: str) -> str | None:
    if image in image_map:
        return image_map[image]
    if ":" not in image.rsplit("/", 1)[-1]:
        return image_map.get(f"{image}:latest")
    if image.endswith(":latest"):
        return image_map.get(image[: -len(":latest")])
    return None
