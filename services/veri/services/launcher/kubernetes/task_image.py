"""A task image's WORKDIR, PATH and USER (task_steps.TaskImage), which the agent's and the verifier's execs
need and the pod cannot tell (it runs as root). The launch carries them when the job's start built the image
(TaskEnvironment.image_config: the stack's launcher container has no Docker). Otherwise read from the
registry the nodes pull from (`--registry`), else from this machine's Docker: the images already on a node
that is this host (a one-node cluster on the host's Docker, the kubelet tier), where `veri tasks build` left
them. Once per image (tags are content hashes, or a mapped base the job does not change).
"""

from __future__ import annotations

import threading
from typing import Any

from veri.core.launch import TaskEnvironment, TaskImageConfig
from veri.services.launcher.errors import ImageProblem
from veri.services.launcher.kubernetes.image_egress import registry_config
from veri.services.launcher.task_steps import TaskImage


class TaskImages:
    def __init__(self, registry: str | None, insecure: bool = False) -> None:
        self.registry = registry
        self.scheme = "http" if insecure else "https"
        self._configs: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def of(self, task: TaskEnvironment) -> TaskImage:
        """Blocking (the backend's pool). Raises ImageProblem, naming the fix, when the config cannot be read."""
        if task.image_config is not None:  # read where the job's start built the image
            return TaskImage.of(task, task.image_config)
        with self._lock:
            config = self._configs.get(task.image)
        if config is None:
            config = registry_config(self.registry, task.image, self.scheme) if self.registry \
                else _docker_config(task.image)
            with self._lock:
                self._configs[task.image] = config
        return TaskImage.of(task, TaskImageConfig.of(config))


def _docker_config(image: str) -> dict[str, Any]:
    import docker
    from docker.errors import DockerException, ImageNotFound

    try:
        client = docker.from_env(timeout=60)
    except DockerException as exc:
        raise ImageProblem(f"cannot read the task image {image!r}'s config (WORKDIR, USER, PATH): no --registry and "
                           f"no Docker here ({exc}): start the launcher with --registry R (the task images pushed "
                           "there) or on the node whose Docker has them") from None
    try:
        found: dict[str, Any] = client.images.get(image).attrs.get("Config") or {}
        return found
    except ImageNotFound:
        raise ImageProblem(f"the task's image {image!r} is not on this machine: build it with `veri tasks build "
                           "TASK_DIR` (or map its FROM with --image-map) on the node") from None
    finally:
        client.close()
