"""What a Harbor task's rollouts need before the first one starts, resolved once (at a command's or a job's
start): each task's image (`veri tasks build`, cached by its content hash), the verifier's tools
(/veri/tools, when vendored) and a bundle image's runtime tree (/veri/rt). Handed down as a plain mapping
{task folder (resolved): {"image", "image_config", "tools_dir", "runtime_tree", "harness_command"}}, so the
tiers below import nothing from tools/. `image_config` (core/launch.py TaskImageConfig) is the image's own
WORKDIR, USER and PATH, read here where the image is: a launcher with no Docker (the stack's on Kubernetes)
cannot read it."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker

from veri.core.harbor_task import DOCKERFILE, load_task
from veri.core.launch import TaskImageConfig
from veri.core.problems import ProblemsError
from veri.services.launcher.task_runtime.runtime import harness_command, runtime_tree
from veri.services.launcher.task_runtime.verifier_tools import VerifierToolsError, verifier_tools
from veri.tools.tasks.build import TaskBuildError, build_tasks

Log = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def _prebuilt(task: Path, client: Any) -> str:
    try:
        image = load_task(task).config.environment.docker_image
    except ProblemsError as error:
        raise TaskBuildError(str(error)) from None
    if not image:
        raise TaskBuildError(f"{task}: no {DOCKERFILE} and no [environment] docker_image: nothing to run it in")
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        raise TaskBuildError(f"{task}: docker_image {image} is not on this machine (rollouts pull nothing): "
                             f"`docker pull {image}` or `docker load` it first") from None
    return image


def prepare_tasks(tasks: list[Path], vendor: Path, *, image_map: dict[str, str] | None = None,
                  runtime_image: str | None = None, entrypoint: list[str] | None = None, client: Any = None,
                  log: Log = _stderr) -> dict[str, dict[str, Any]]:
    """Build every task's image (raises TaskBuildError naming each FROM that cannot be had offline), the
    verifier tools (None, with a warning, when nothing is vendored: a test.sh that installs nothing still
    runs) and runtime_image's runtime tree (None without one); `entrypoint`: the bundle's, rewritten to run
    from that tree. A task with a prebuilt `[environment] docker_image` and no Dockerfile runs on that image,
    which must be on this machine (nothing is pulled)."""
    client = client or docker.from_env(timeout=600)
    built = [task for task in tasks if (task / DOCKERFILE).is_file()]
    tags = build_tasks(built, vendor, image_map=image_map, client=client, log=log) if built else {}
    for task in tasks:
        if task not in tags:
            tags[task] = _prebuilt(task, client)
    try:
        tools: str | None = str(verifier_tools(vendor))
    except VerifierToolsError as exc:
        log(f"tasks: no verifier tools ({exc}); test.sh runs with what the task's image has")
        tools = None
    tree = str(runtime_tree(runtime_image, client=client, log=log)) if runtime_image else None
    command = harness_command(entrypoint) if entrypoint else []
    return {str(task.resolve()): {"image": tag, "image_config": _image_config(tag, client), "tools_dir": tools,
                                  "runtime_tree": tree, "harness_command": command}
            for task, tag in tags.items()}


def _image_config(image: str, client: Any) -> dict[str, Any]:
    config = client.images.get(image).attrs.get("Config") or {}
    return TaskImageConfig.of(config).model_dump()
