"""`veri validate` on a job whose dataset is Harbor task folders: before any rollout, every task's `FROM`
must be had offline (on this machine, or mapped by the job's `image_map:` to an image that is). On a
kubernetes launcher a note says what the nodes must have."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from veri.core import envs
from veri.core.config import DatasetConfig, JobConfig
from veri.core.dockerfile import TASK_BASE, TASK_BASE_FROM, base_images, lookup
from veri.core.harbor_task import DOCKERFILE, find_tasks
from veri.core.problems import Problem, ProblemsError

BACKEND_VARIABLE = f"{envs.VERI_LAUNCHER_PREFIX}BACKEND"


def harbor_folders(config: JobConfig) -> list[tuple[str, Path]]:
    """(the config key, a task folder) for every Harbor task the job runs (dataset, eval_dataset)."""
    found = []
    specs: list[tuple[str, DatasetConfig | None]] = [("dataset", config.dataset),
                                                     ("eval_dataset", config.eval_dataset)]
    for key, spec in specs:
        if spec is None or spec.harbor is None:
            continue
        try:
            found += [(f"{key}.harbor", folder) for folder in find_tasks(spec.harbor)]
        except ProblemsError:
            continue  # the dataset check names it
    return found


def backend_notes(folders: list[tuple[str, Path]]) -> list[str]:
    """What a kubernetes launcher needs for Harbor tasks (its rollouts fail naming it otherwise)."""
    if not folders or os.environ.get(BACKEND_VARIABLE, "docker") != "kubernetes":
        return []
    return [f"{folders[0][0]}: the launcher is kubernetes ({BACKEND_VARIABLE}): each task runs in its image on a "
            "node, which must have it (its Docker: `veri tasks build` there; a node on this host has what `make "
            "train` builds) or pull it from the launcher's --registry; the runtime tree and verifier tools are "
            "hostPath volumes at this host's path of build/tasks, so a node elsewhere needs that folder there"]


def missing_bases(folders: list[tuple[str, Path]], image_map: dict[str, str], has_image: Any) -> list[Problem]:
    """A problem for each task FROM that is neither on this machine nor mapped to an image that is.
    `has_image(name) -> bool`. veri/task-os-base counts as had when veri/os-base is (the build makes it)."""
    problems = []
    for key, folder in folders:
        dockerfile = folder / DOCKERFILE
        if not dockerfile.is_file():
            continue
        for image in base_images(dockerfile.read_text()):
            target = lookup(image_map, image) or image
            local = TASK_BASE_FROM if target == TASK_BASE and not has_image(TASK_BASE) else target
            if has_image(local):
                continue
            if target != image:
                problems.append(Problem(f"{key}: {folder.name}", f"FROM {image} is mapped to {target}, which is "
                                        "not on this machine", f"build or load {local} (`make images` builds "
                                        f"{TASK_BASE_FROM}), or map {image} elsewhere in `image_map:`"))
            else:
                problems.append(Problem(f"{key}: {folder.name}", f"FROM {image} is not on this machine and not "
                                        "mapped (task images build offline)",
                                        f"add `image_map: {{{image}: {TASK_BASE}}}` to the job (Debian bookworm "
                                        f"with apt and pip served offline), or `docker load` {image}"))
    return problems


def docker_has_image() -> Any:
    """has_image over this machine's Docker daemon, or None when none answers."""
    try:
        import docker

        client = docker.from_env(timeout=10)
        client.ping()
    except Exception:  # noqa: BLE001 - no SDK, no daemon: the check is skipped with a note
        return None

    def has(name: str) -> bool:
        try:
            client.images.get(name)
            return True
        except docker.errors.ImageNotFound:
            return False

    return has
