"""A Harbor task's rollout pod (one Job, as every rollout): the task's image, the task's limits, workdir and
[environment.env], the harness contract (credentials from the rollout's Secret), and the mount points of
the docker backend's task sandbox (task_sandbox.py) as volumes. Pure functions: no API calls here.

The pod's one container runs the image's ENTRYPOINT with `sleep infinity` as its command; everything
else (the agent's turn, the verifier) is an exec through the API (kubernetes/pod_exec.py), as on docker.
Kubernetes' exec has no privileged mode: an exec gets the container's capabilities. So the container
keeps, in its bounding set, what the agent's set-up and the verifier need (TASK_CAPS: Docker's default
set, which test.sh gets, and SYS_ADMIN for `unshare` and the verifier's mounts); the agent's exec drops
them all before the agent runs (task_sandbox.OUTER), a healthcheck too (pod_exec.py). docs/security.md,
"Harbor tasks on Kubernetes", says what that changes.
"""

from __future__ import annotations

import math
from typing import Any

from veri.core.harness import OUTPUT_MOUNT
from veri.core.launch import RolloutLaunch, SandboxLimits, TaskEnvironment
from veri.core.registry import registry_image
from veri.services.launcher import task_sandbox, verifier
from veri.services.launcher.kubernetes.objects import (
    Egress,
    OutputVolume,
    PodSettings,
    cpu,
    harness_env,
    job_around,
    pod_basics,
)
from veri.services.launcher.task_runtime.layout import RUNTIME_MOUNT, TOOLS_MOUNT

TASK_CONTAINER = "task"
TASK_CAPS = tuple(sorted({cap.upper() for cap in verifier.DEFAULT_CAPS} | {"SYS_ADMIN"}))
LOGS_MB = 256


def task_job_manifest(launch: RolloutLaunch, name: str, pod: PodSettings, output: OutputVolume,
                      output_subpath: str, egress: Egress, deadline_s: float) -> dict[str, Any]:
    """The task's Job. `deadline_s`: the control plane's backstop (the pod's start, the agent's turn and
    the verifier's; the launcher ends each step itself before)."""
    task = launch.task_env
    assert task is not None
    limits = task_sandbox.resources(task, launch.limits)
    container = {
        "name": TASK_CONTAINER,
        "image": registry_image(task.image, pod.registry),
        "imagePullPolicy": "IfNotPresent",  # built by `veri tasks build` (a content-hash tag) or mapped: on the node
        "args": ["sh", "-c", "sleep infinity"],  # the image's ENTRYPOINT is kept (it may start the task's services)
        "env": task_env(launch, name),
        "resources": {"limits": resources(limits, task), "requests": resources(limits, task)},
        "securityContext": {
            "runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False,  # the agent's user is set per exec
            "allowPrivilegeEscalation": False, "privileged": False, "readOnlyRootFilesystem": False,
            "capabilities": {"drop": ["ALL"], "add": list(TASK_CAPS)},
        },
        "volumeMounts": volume_mounts(task, output_subpath),
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if task.workdir:
        container["workingDir"] = task.workdir
    spec = {**pod_basics(pod), "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [container], "volumes": volumes(task, output)}
    return job_around(launch, name, pod, egress, spec, max(1, math.ceil(deadline_s)))


def task_env(launch: RolloutLaunch, secret: str) -> list[dict[str, Any]]:
    """The container's variables: the task's [environment.env], then the harness contract (it wins a name
    both have, as the agent's exec does on docker). Execs other than the agent's unset the contract
    (pod_exec.exec_command): test.sh never sees the rollout's key."""
    task = launch.task_env
    assert task is not None
    contract = harness_env(launch, secret)
    names = {item["name"] for item in contract}
    return [{"name": key, "value": value} for key, value in task.env.items() if key not in names] + contract


def resources(limits: SandboxLimits, task: TaskEnvironment) -> dict[str, str]:
    """Requests = limits (the Guaranteed class); [environment] storage_mb as the container's ephemeral
    storage, which the kubelet enforces by evicting the pod."""
    found = {"cpu": cpu(limits.cpus), "memory": f"{limits.memory_mb}Mi"}
    if task.storage_mb is not None:
        found["ephemeral-storage"] = f"{task.storage_mb}Mi"
    return found


def volume_mounts(task: TaskEnvironment, output_subpath: str) -> list[dict[str, Any]]:
    """task_sandbox.mounts' points: /tests, /logs/verifier and /veri/verify read-only and empty (mount
    points the agent cannot rename or unmount), /logs writable, the runtime tree and the verifier's tools
    read-only, VERI_OUTPUT_DIR."""
    mounts: list[dict[str, Any]] = [
        {"name": "tests", "mountPath": verifier.TESTS_MOUNT, "readOnly": True},
        {"name": "logs", "mountPath": task_sandbox.LOGS_ROOT},
        {"name": "verifier-logs", "mountPath": verifier.VERIFIER_LOGS, "readOnly": True},
        {"name": "verifier-scratch", "mountPath": verifier.SCRATCH_MOUNT, "readOnly": True},
        {"name": "output", "mountPath": OUTPUT_MOUNT, "subPath": output_subpath},
    ]
    if task.runtime_tree:
        mounts.append({"name": "runtime", "mountPath": RUNTIME_MOUNT, "readOnly": True})
    if task.tools_dir:
        mounts.append({"name": "tools", "mountPath": TOOLS_MOUNT, "readOnly": True})
    return mounts


def volumes(task: TaskEnvironment, output: OutputVolume) -> list[dict[str, Any]]:
    """The runtime tree and the tools are host folders the launcher made (build/tasks/): hostPath, at the
    path the launcher sees, so the node must be the launcher's host (or have build/tasks at that path)."""
    empty = {"emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}
    found: list[dict[str, Any]] = [
        {"name": "tests", **empty},
        {"name": "logs", "emptyDir": {"sizeLimit": f"{LOGS_MB}Mi"}},
        {"name": "verifier-logs", **empty},
        {"name": "verifier-scratch", **empty},
        output.volume(),
    ]
    if task.runtime_tree:
        found.append({"name": "runtime", "hostPath": {"path": task.runtime_tree, "type": "Directory"}})
    if task.tools_dir:
        found.append({"name": "tools", "hostPath": {"path": task.tools_dir, "type": "Directory"}})
    return found


def task_egress(bundle: Egress, task: TaskEnvironment) -> Egress:
    """The stricter of the bundle's egress (as the backend maps it: web or none) and the task's ask: `none`
    unless both allow the web. A task's allowlist is `none` here, as a bundle's is (NetworkPolicy has
    addresses, not names; the egress gateway is not deployed on Kubernetes)."""
    return "web" if bundle == "web" and task.network_mode == "public" else "none"


def deadline(launch: RolloutLaunch, grace_s: float) -> float:
    """The Job's deadline: the pod's start (up to the launch's timeout), the agent's turn, the verifier's,
    and `grace_s`."""
    task = launch.task_env
    assert task is not None
    return launch.timeout_s + task_sandbox.agent_timeout(task, launch.timeout_s) + task.verifier_timeout_s + grace_s
