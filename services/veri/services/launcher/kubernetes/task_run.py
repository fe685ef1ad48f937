"""One Harbor-task rollout on the kubernetes backend: the task's Job (task_objects.py), then the steps the
docker backend runs (task_steps.py), each an exec through the API (pod_exec.py), then the Job deleted.
`KubernetesBackend.run` hands a launch with a `task_env` here.

Order: the rollout's Secret and Job; wait for its pod to run (the task's image on the node, the
container up); the task's healthcheck, when it has one; the agent's exec (its exit line, or its timeout:
then its PID namespace is killed, the rollout `truncated` and still verified); the harness's log
tails; the pod moved to the `offline` NetworkPolicy (what the agent left running loses the network where
the cluster enforces policies) and the verifier's exec in a network namespace of its own (loopback
only, whatever the cluster enforces); the Job deleted whatever happened. Why an exec and not a second
container: docs/architecture.md, "Harbor tasks on Kubernetes".
"""

from __future__ import annotations

import asyncio
import functools
import time
from pathlib import Path
from typing import TYPE_CHECKING

from kubernetes.client.exceptions import ApiException

from veri.core import envs
from veri.core.harness import OUTPUT_MOUNT
from veri.core.launch import LaunchResult, RolloutLaunch, TaskEnvironment, VerifierResult
from veri.core.rules import VerifierError
from veri.services.launcher import task_sandbox, task_steps
from veri.services.launcher.errors import ImageProblem
from veri.services.launcher.kubernetes import objects, task_objects
from veri.services.launcher.kubernetes.objects import Egress
from veri.services.launcher.kubernetes.pod_exec import PodEnv, PodExec
from veri.services.launcher.kubernetes.watch import FATAL_WAITING, RolloutState
from veri.services.launcher.outputs import enforce_output_cap, hand_back, prepare_output
from veri.services.launcher.task_steps import AgentTurn, Opener, TaskImage

if TYPE_CHECKING:
    from veri.services.launcher.kubernetes.backend import KubernetesBackend

JOB_GRACE_S = task_steps.VERIFIER_GRACE_S + 60  # the Job's deadline past the launcher's own limits: a backstop


async def run_task(backend: KubernetesBackend, launch: RolloutLaunch, output_dir: Path,
                   started: float) -> LaunchResult:
    task = launch.task_env
    assert task is not None
    image = await backend._call(backend.task_images.of, task)
    egress = task_objects.task_egress(await backend._call(_bundle_egress, backend, launch.image, task.agent), task)
    limits = task_sandbox.resources(task, launch.limits)
    tests = await backend._call(task_steps.tests_tar, Path(task.tests_dir))
    subpath = backend._output_subpath(output_dir)
    await backend._call(_prepare_output, output_dir)
    name = objects.object_name(launch.rollout_id)
    body = task_objects.task_job_manifest(launch, name, backend.pod, backend.output, subpath, egress,
                                          task_objects.deadline(launch, JOB_GRACE_S))
    contract = {**launch.env, envs.VERI_OUTPUT_DIR: OUTPUT_MOUNT}
    pod_env = PodEnv(container={**task.env, **contract}, base=dict(task.env))
    state = backend.watch.track(name)
    creating: asyncio.Future[None] | None = None
    turn = AgentTurn()
    verified: VerifierResult | None = None
    tails = ("", "")
    try:
        creating = asyncio.ensure_future(backend._call(backend._create, launch, name, egress, body))
        await asyncio.shield(creating)
        turn.error = await _wait_running(state, launch, backend.pod.registry)
        if turn.error is None:
            assert state.pod is not None
            open_exec: Opener = functools.partial(PodExec, backend.core, backend.pod.namespace, state.pod,
                                                  task_objects.TASK_CONTAINER, pod_env=pod_env)
            if task.healthcheck is not None:
                turn.error = await backend._call(task_steps.wait_healthy, open_exec, task.healthcheck, image.workdir)
            if turn.error is None:
                turn = await task_steps.agent_turn(backend._call, open_exec, task, launch, image, contract)
                tails = await backend._call(task_steps.agent_tails, open_exec, limits.log_tail_bytes)
            if turn.error is None:
                verified = await backend._call(_verify, backend, state.pod, open_exec, task, image, tests)
    finally:  # every way out, cancellation included: the rollout's objects must not outlive it
        backend.watch.untrack(name)
        if creating is not None:
            await asyncio.shield(backend._delete_after(creating, name))
    truncated = await backend._call(enforce_output_cap, output_dir, limits.output_max_bytes)
    await backend._call(hand_back, output_dir)  # to the services' user: the trainer reads it
    return task_steps.launch_result(launch, turn, tails, verified, output_dir, truncated, started)


def _bundle_egress(backend: KubernetesBackend, image: str, agent: str) -> Egress:
    """The bundle's egress as the backend maps it; for oracle and nop, whose launch image need not be a
    bundle's: its label when there is one, else web (the task's own ask then decides)."""
    if agent == "harness":
        return backend.image_egress.of(image)
    try:
        return backend.image_egress.of(image)
    except ImageProblem:
        return "web"


def _prepare_output(output_dir: Path) -> None:
    prepare_output(output_dir)
    output_dir.chmod(0o777)  # the task's agent user may be any uid (root without capabilities among them)


async def _wait_running(state: RolloutState, launch: RolloutLaunch, registry: str | None) -> str | None:
    """None once the task's container runs; else why it never will (within the launch's timeout)."""
    deadline = time.monotonic() + launch.timeout_s
    while True:
        if state.exit_code is not None or state.phase in ("Succeeded", "Failed"):
            return (f"the task's container ended before the agent's turn (exit {state.exit_code}, "
                    f"{state.terminated_reason or state.phase}): the task image's ENTRYPOINT must run the command "
                    "it is given (`sleep infinity`)")
        if state.phase == "Running":
            return None
        if state.waiting_reason in FATAL_WAITING:
            return _waiting_note(state, registry)
        if state.job_condition and state.job_condition[0] == "Failed":
            return f"the rollout's Job failed: {state.job_condition[1]}: {state.job_condition[2]}"
        if state.job_gone or state.pod_deleting:
            return "the rollout's Job or pod was deleted by someone else"
        left = deadline - time.monotonic()
        if left <= 0:
            why = state.unschedulable or " ".join(filter(None, (state.waiting_reason, state.waiting_message))) \
                or f"phase {state.phase or 'none'}"
            return (f"the task's pod never started within timeout_s={launch.timeout_s:g} ({why}): check the "
                    "cluster's capacity and `kubectl describe job` in the namespace")
        state.changed.clear()
        try:
            async with asyncio.timeout(max(0.05, left)):
                await state.changed.wait()
        except TimeoutError:
            pass


def _waiting_note(state: RolloutState, registry: str | None) -> str:
    reason, message = state.waiting_reason, state.waiting_message or ""
    if reason in ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"):
        fix = (f"push it to {registry}" if registry else
               "build it on the node (`veri tasks build TASK_DIR`, whose Docker the kubelet uses) or push it to a "
               "registry the nodes pull from and start the launcher with --registry R")
        return f"the node has no task image ({reason}: {message}): {fix}"
    return f"the task's container could not start ({reason}: {message})"


def _verify(backend: KubernetesBackend, pod: str, open_exec: Opener, task: TaskEnvironment, image: TaskImage,
            tests: bytes) -> VerifierResult:
    try:
        backend.core.patch_namespaced_pod(pod, backend.pod.namespace,
                                          {"metadata": {"labels": {objects.LABEL_EGRESS: objects.OFFLINE}}})
    except ApiException as exc:
        return VerifierResult(error=VerifierError.ERROR, message=(
            f"the task's pod could not be moved to the offline network policy before the verifier "
            f"({exc.status} {exc.reason})"))
    return task_steps.verify(open_exec, task, image, tests, own_network=True)
