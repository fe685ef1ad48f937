"""`kubernetes` backend: one Job per rollout in one namespace, through the official client.

A rollout: its Secret (the API key), its Job (objects.py: gVisor RuntimeClass, non-root, read-only
root, no capabilities, no service-account token, limits, `activeDeadlineSeconds` = the harness
timeout), then the Secret is given the Job as owner. The shared watches (watch.py) say how it ends;
the pod's log tail is read through the API; then the Job is deleted with foreground propagation (its
pod and Secret go first). A Harbor task's launch runs its own Job (task_run.py).
Creation passes a token bucket (`create_per_second`, `create_burst`) and at
most `max_sandboxes` rollouts are alive at once.

Statuses as the docker backend's: exit 0 completed; another exit failed (`exit_nonzero`); past the
deadline truncated (`timeout`), exit code None; a pod that cannot start (image not pullable, never
scheduled before the deadline, API errors) failed with `infrastructure_error`; cancelled: its Job is
deleted before the cancellation goes on.

Logs: the kubelet keeps one log per container, stdout and stderr interleaved; its tail is the result's
`stderr_tail` (where veri shows a failed rollout's output), `stdout_tail` stays empty.

Output: VERI_OUTPUT_DIR is a subPath of one volume the launcher also has mounted at its output root
(objects.OutputVolume): a PVC for several nodes (ReadWriteMany), a hostPath on one node. The launcher
creates the rollout's folder (uid 1000) before the pod, and caps it after the end.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import json
import os
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import structlog
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from veri.core.episodes import RolloutStatus
from veri.core.launch import LaunchResult, RolloutLaunch
from veri.core.registry import RegistryError, check_registry
from veri.services.launcher.errors import ImageProblem, SandboxUnavailable
from veri.services.launcher.kubernetes import objects
from veri.services.launcher.kubernetes.image_egress import ImageEgress
from veri.services.launcher.kubernetes.objects import Egress, OutputVolume, PodSettings
from veri.services.launcher.kubernetes.pacing import CreationPacer
from veri.services.launcher.kubernetes.task_image import TaskImages
from veri.services.launcher.kubernetes.task_run import run_task
from veri.services.launcher.kubernetes.watch import FATAL_WAITING, ClusterWatch, RolloutState
from veri.services.launcher.outputs import enforce_output_cap, hand_back, prepare_output
from veri.services.launcher.tails import Tail

log = structlog.get_logger("veri.services.launcher.kubernetes")

FOREGROUND = client.V1DeleteOptions(propagation_policy="Foreground")
DEADLINE_GRACE_S = 30.0  # past the Job's deadline with no verdict from the control plane: decide here
EXIT_GRACE_S = 5.0  # a pod deleted under a rollout: how long to wait for the Job to say why
LOG_LINES_PER_KIB = 16  # tail_lines asked per KiB of log_tail_bytes (the API counts lines, not bytes)


class KubernetesBackend:
    name = "kubernetes"

    def __init__(
        self,
        *,
        namespace: str,
        launcher_id: str = "default",
        output_root: Path,
        output_claim: str | None = None,
        runtime_class: str = "gvisor",
        registry: str | None = None,
        service_account: str | None = None,
        proxy_selector: dict[str, str] | None = None,
        proxy_port: int = 8000,
        proxy_namespace: str | None = None,
        max_sandboxes: int = 64,
        create_per_second: float = 20.0,
        create_burst: int = 20,
        egress: Egress = "web",
        registry_insecure: bool = False,
        kubeconfig: Path | None = None,
        host_aliases: dict[str, str] | None = None,
        output_host_path: str | None = None,
        api_client: client.ApiClient | None = None,
    ) -> None:
        """Checks the cluster before anything runs (namespace, RuntimeClass) and makes the namespace's
        NetworkPolicies; raises SandboxUnavailable with the fix when it cannot.

        `host_aliases` (name -> IP): pinned in every rollout pod's /etc/hosts, allowed by its policies.
        `output_host_path`: the output root's path on the node (the hostPath), when this process sees
        it elsewhere (a launcher container: compose.kubernetes.yaml); default the output root."""
        self.runtime = runtime_class
        try:
            registry = check_registry(registry) if registry else None
        except RegistryError as exc:
            raise SandboxUnavailable(str(exc)) from None
        self.pod = PodSettings(namespace=namespace, launcher_id=launcher_id, runtime_class=runtime_class,
                               registry=registry, service_account=service_account,
                               host_aliases=dict(host_aliases or {}) or None)
        self.output_root = Path(output_root).absolute()
        self.output = OutputVolume(claim=output_claim,
                                   host_path=None if output_claim else output_host_path or str(self.output_root))
        self.max_sandboxes = max_sandboxes
        self.image_egress = ImageEgress(registry, fallback=egress, insecure=registry_insecure)
        self.task_images = TaskImages(registry, insecure=registry_insecure)
        self.create_per_second, self.create_burst = create_per_second, create_burst
        self.api = api_client or _api_client(kubeconfig, pool_size=2 * max_sandboxes + 8)
        self.core = client.CoreV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)
        self.selector = objects.launcher_selector(launcher_id)
        self._pool = ThreadPoolExecutor(max_workers=max_sandboxes + 8, thread_name_prefix="veri-k8s")
        self._per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[asyncio.Semaphore,
                                                                                    CreationPacer]] = (
            weakref.WeakKeyDictionary())
        self.watch = ClusterWatch(self.api, namespace, self.selector)
        # Of the last rollouts (bench/k8s_launch.py reads them): when each one's objects were created
        # (time.time()); launch -> pod Running and objects created -> pod Running, in seconds.
        self.created_at: collections.deque[float] = collections.deque(maxlen=4096)
        self.launch_to_running: collections.deque[float] = collections.deque(maxlen=4096)
        self.created_to_running: collections.deque[float] = collections.deque(maxlen=4096)
        self._check_cluster()
        for policy in objects.network_policies(
                namespace, launcher_id, proxy_selector or {"app.kubernetes.io/name": "veri-proxy"},
                proxy_port, proxy_namespace, tuple((host_aliases or {}).values())):
            self._apply_policy(policy)

    # --- the SandboxBackend protocol ------------------------------------------------------------

    async def run(self, launch: RolloutLaunch, output_dir: Path) -> LaunchResult:
        started = time.time()
        slots, pacer = self._loop_gates()
        async with slots:
            await pacer.wait()
            try:
                if launch.task_env is not None:  # a Harbor task: its own image, then its verifier (task_run.py)
                    return await run_task(self, launch, Path(output_dir).absolute(), started)
                return await self._run(launch, Path(output_dir).absolute(), started)
            except ImageProblem as exc:
                error = str(exc)
            except ApiException as exc:
                error = f"kubernetes API: {exc.status} {exc.reason}: {_api_message(exc)}"
            except (HTTPError, OSError) as exc:
                error = f"{type(exc).__name__}: {exc}"
            log.error("rollout failed to run", rollout_id=launch.rollout_id, error=error)
        return LaunchResult(rollout_id=launch.rollout_id, status=RolloutStatus.FAILED, infrastructure_error=error,
                            started_at=started, duration_s=time.time() - started)

    async def remove_leftovers(self) -> int:
        """Deletes this launcher's Jobs (foreground) and Secrets a crash left without their Job."""
        ns = self.pod.namespace
        jobs = await self._call(self.batch.list_namespaced_job, ns, label_selector=self.selector)
        secrets = await self._call(self.core.list_namespaced_secret, ns, label_selector=self.selector)
        names = {job.metadata.name for job in jobs.items}
        for name in names:
            await self._call(self._delete_job, name)
        orphans = [s.metadata.name for s in secrets.items if not s.metadata.owner_references]
        for name in orphans:
            await self._call(self._delete_secret, name)
        if names or orphans:
            log.info("removed leftover rollouts", jobs=len(names), secrets=len(orphans), namespace=ns)
        return len(names) + len(orphans)

    def close(self) -> None:
        self.watch.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.api.close()

    # --- one rollout ------------------------------------------------------------------------------

    async def _run(self, launch: RolloutLaunch, output_dir: Path, started: float) -> LaunchResult:
        name = objects.object_name(launch.rollout_id)
        egress = await self._call(self.image_egress.of, launch.image)
        subpath = self._output_subpath(output_dir)
        await self._call(prepare_output, output_dir)
        state = self.watch.track(name)
        creating: asyncio.Future | None = None
        try:
            body = objects.job_manifest(launch, name, self.pod, self.output, subpath, egress)
            creating = asyncio.ensure_future(self._call(self._create, launch, name, egress, body))
            await asyncio.shield(creating)
            created = time.time()
            self.created_at.append(created)
            status, exit_code, notes = await self._verdict(state, launch)
            if state.running_at is not None:
                self.launch_to_running.append(state.running_at - started)
                self.created_to_running.append(state.running_at - created)
            logs = await self._call(self._log_tail, state, launch.limits.log_tail_bytes)
        finally:  # every way out, cancellation included: the rollout's objects must not outlive it
            self.watch.untrack(name)
            if creating is not None:
                await asyncio.shield(self._delete_after(creating, name))
        if status is RolloutStatus.FAILED and exit_code is None and not notes:
            notes.append("[veri] the pod ended without an exit code")
        truncated = await self._call(enforce_output_cap, output_dir, launch.limits.output_max_bytes)
        await self._call(hand_back, output_dir)  # to the services' user: the trainer reads it
        stderr = "\n".join(part for part in (logs, *notes) if part)
        infrastructure = notes[0].removeprefix("[veri] ") if status is RolloutStatus.FAILED and exit_code is None \
            else None
        return LaunchResult(
            rollout_id=launch.rollout_id, status=status, exit_code=exit_code, stdout_tail="", stderr_tail=stderr,
            output_dir=str(output_dir), output_truncated=truncated, infrastructure_error=infrastructure,
            started_at=started, duration_s=time.time() - started,
        )

    async def _verdict(self, state: RolloutState, launch: RolloutLaunch) -> tuple[RolloutStatus, int | None,
                                                                                  list[str]]:
        """Waits for the rollout's end as the watches report it: (status, exit code, notes)."""
        deadline = time.monotonic() + launch.timeout_s + DEADLINE_GRACE_S
        deleted_at: float | None = None
        ended_at: float | None = None  # when the watches reported the Job's end
        while True:
            condition = state.job_condition
            if condition and condition[0] == "Failed" and condition[1] == "DeadlineExceeded":
                if state.running_at is None:  # the harness never ran: not its timeout
                    return RolloutStatus.FAILED, None, [_never_started(state, launch)]
                return RolloutStatus.TRUNCATED, None, [
                    f"[veri] still running after timeout_s={launch.timeout_s:g}: the Job's deadline killed it"]
            if state.exit_code is not None and state.phase in ("Succeeded", "Failed") and not state.pod_deleting:
                return _exit_verdict(state, launch)
            now = time.monotonic()
            if condition and ended_at is None:
                ended_at = now
            since_end = now - ended_at if ended_at is not None else 0.0
            # The two watches are two threads: the Job's end may come in before its pod's exit code.
            # Give the pod's event EXIT_GRACE_S before deciding without it.
            if condition and condition[0] == "Complete" and (state.exit_code is not None
                                                              or since_end > EXIT_GRACE_S):
                return RolloutStatus.COMPLETED, state.exit_code or 0, []
            if condition and condition[0] == "Failed" and state.exit_code is not None:
                return _exit_verdict(state, launch)
            if condition and condition[0] == "Failed" and since_end > EXIT_GRACE_S:
                return RolloutStatus.FAILED, None, [f"[veri] the Job failed: {condition[1]}: {condition[2]}"]
            if state.waiting_reason in FATAL_WAITING:
                return RolloutStatus.FAILED, None, [_waiting_note(state, self.pod.registry)]
            if state.job_gone:
                return RolloutStatus.FAILED, None, ["[veri] the rollout's Job was deleted by someone else"]
            if state.pod_deleting and deleted_at is None:
                deleted_at = now  # the Job controller's deadline kill, or someone else's
            if deleted_at is not None and now - deleted_at > EXIT_GRACE_S:
                if state.exit_code is not None:
                    return _exit_verdict(state, launch)
                return RolloutStatus.FAILED, None, ["[veri] the rollout's pod was deleted by someone else"]
            if now > deadline:
                if state.running_at is None:
                    return RolloutStatus.FAILED, None, [_never_started(state, launch)]
                return RolloutStatus.TRUNCATED, None, [
                    f"[veri] still running after timeout_s={launch.timeout_s:g}: the launcher deleted it"]
            state.changed.clear()
            grace = deleted_at is not None or ended_at is not None
            wake = min(deadline - now, EXIT_GRACE_S) if grace else deadline - now
            # asyncio.timeout, not wait_for: on 3.11 wait_for loses a cancel that lands as the event is set
            # (the rollout then ran on after its group was cancelled)
            try:
                async with asyncio.timeout(max(0.05, wake)):
                    await state.changed.wait()
            except TimeoutError:
                pass

    def _create(self, launch: RolloutLaunch, name: str, egress: Egress, body: dict[str, Any]) -> None:
        """Secret, Job (`body`), then the Job as the Secret's owner (blocking; the pool)."""
        ns = self.pod.namespace
        self.core.create_namespaced_secret(ns, objects.secret_manifest(launch, name, self.pod, egress))
        job = self.batch.create_namespaced_job(ns, body, _preload_content=False)
        created = _json(job)
        self.core.patch_namespaced_secret(name, ns, {"metadata": {"ownerReferences": [
            objects.owner_reference(created)]}})

    async def _delete_after(self, creating: asyncio.Future, name: str) -> None:
        """Once creation is over (it may still run in a pool thread when cancelled), delete."""
        await asyncio.wait({creating})
        owned = not creating.cancelled() and creating.exception() is None
        await self._call(self._delete_job, name)
        if not owned:  # a Secret created without its Job (or its owner link) goes by name
            await self._call(self._delete_secret, name)

    def _delete_job(self, name: str) -> None:
        try:
            self.batch.delete_namespaced_job(name, self.pod.namespace, body=FOREGROUND)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def _delete_secret(self, name: str) -> None:
        try:
            self.core.delete_namespaced_secret(name, self.pod.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def _log_tail(self, state: RolloutState, limit: int) -> str:
        """The harness container's log tail (bounded in memory however much it printed)."""
        if state.pod is None:
            return ""
        try:
            response = self.core.read_namespaced_pod_log(
                state.pod, self.pod.namespace, container=objects.CONTAINER,
                tail_lines=max(100, limit // 1024 * LOG_LINES_PER_KIB), _preload_content=False)
        except ApiException as exc:
            if exc.status in (400, 404):  # the pod is gone (deadline kill) or never ran a container
                return ""
            raise
        tail = Tail(limit)
        try:
            for chunk in response.stream(65536):
                tail.feed(chunk)
        finally:
            response.release_conn()
        return tail.text()

    # --- set-up -------------------------------------------------------------------------------------

    def _check_cluster(self) -> None:
        ns = self.pod.namespace
        try:
            self.core.read_namespace(ns)
        except ApiException as exc:
            if exc.status == 404:
                raise SandboxUnavailable(f"namespace {ns!r} does not exist: kubectl create namespace {ns}") from None
            raise SandboxUnavailable(f"the Kubernetes API refused ({exc.status} {exc.reason}): "
                                     f"{_api_message(exc)}; check the kubeconfig / service account") from None
        except (HTTPError, OSError) as exc:
            raise SandboxUnavailable(f"no Kubernetes API ({type(exc).__name__}: {exc}): check the kubeconfig "
                                     "(--kubeconfig, KUBECONFIG) or run the launcher in the cluster") from None
        try:
            client.NodeV1Api(self.api).read_runtime_class(self.runtime, _preload_content=False)
        except ApiException as exc:
            if exc.status != 404:
                raise
            raise SandboxUnavailable(
                f"the cluster has no RuntimeClass {self.runtime!r}: install runsc (gVisor) on the nodes and "
                "apply deploy/kubernetes/base/runtimeclass.yaml (handler runsc), or name yours with "
                "--runtime-class") from None
        if self.output.host_path and not self.output_root.is_dir():
            raise SandboxUnavailable(f"output root {self.output_root} does not exist: create it (rollout pods "
                                     "mount it as a hostPath), or pass --output-claim with a shared volume")

    def _apply_policy(self, policy: dict[str, Any]) -> None:
        api = client.NetworkingV1Api(self.api)
        name, ns = policy["metadata"]["name"], policy["metadata"]["namespace"]
        try:
            api.replace_namespaced_network_policy(name, ns, policy)
        except ApiException as exc:
            if exc.status != 404:
                raise
            api.create_namespaced_network_policy(ns, policy)

    def _output_subpath(self, output_dir: Path) -> str:
        if not output_dir.is_relative_to(self.output_root):
            raise ValueError(f"output folder {output_dir} is not under the launcher's output root "
                             f"{self.output_root} (the volume rollout pods mount)")
        return str(output_dir.relative_to(self.output_root))

    def _loop_gates(self) -> tuple[asyncio.Semaphore, CreationPacer]:
        loop = asyncio.get_running_loop()
        gates = self._per_loop.get(loop)
        if gates is None:
            gates = self._per_loop[loop] = (asyncio.Semaphore(self.max_sandboxes),
                                            CreationPacer(self.create_per_second, self.create_burst))
        return gates

    async def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))


def _api_client(kubeconfig: Path | None, pool_size: int) -> client.ApiClient:
    """In the cluster: its service account; else the kubeconfig (the flag, $KUBECONFIG, ~/.kube/config)."""
    configuration = client.Configuration()
    try:
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=configuration)
        else:
            config.load_kube_config(config_file=str(kubeconfig) if kubeconfig else None,
                                    client_configuration=configuration)
    except (config.ConfigException, OSError) as exc:
        raise SandboxUnavailable(f"no Kubernetes configuration ({exc}): pass --kubeconfig, set KUBECONFIG, "
                                 "or run the launcher in the cluster") from None
    configuration.connection_pool_maxsize = pool_size  # one connection per thread, no "pool is full" noise
    return client.ApiClient(configuration)


def _exit_verdict(state: RolloutState, launch: RolloutLaunch) -> tuple[RolloutStatus, int | None, list[str]]:
    code = int(state.exit_code or 0)
    if code == 0:
        return RolloutStatus.COMPLETED, 0, []
    notes = []
    if state.terminated_reason == "OOMKilled" or code == 137:
        notes.append(f"[veri] exit {code}: killed - most likely the memory limit ({launch.limits.memory_mb} MB, "
                     "SandboxLimits.memory_mb)")
    return RolloutStatus.FAILED, code, notes


def _never_started(state: RolloutState, launch: RolloutLaunch) -> str:
    why = state.unschedulable or " ".join(filter(None, (state.waiting_reason, state.waiting_message))) \
        or f"phase {state.phase or 'none'}"
    return (f"[veri] the pod never started within timeout_s={launch.timeout_s:g} ({why}): check the cluster's "
            "capacity and `kubectl describe job` in the namespace")


def _waiting_note(state: RolloutState, registry: str | None) -> str:
    reason, message = state.waiting_reason, state.waiting_message or ""
    if reason in ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"):
        fix = (f"push it: veri harness push --registry {registry} BUNDLE" if registry else
               "push it to a registry the nodes pull from (veri harness push --registry R) and start the "
               "launcher with --registry R")
        return f"[veri] the nodes cannot pull the harness image ({reason}: {message}): {fix}"
    return f"[veri] the harness container could not start ({reason}: {message})"


def _json(response: Any) -> dict[str, Any]:
    return json.loads(response.data)


def _api_message(exc: ApiException) -> str:
    try:
        return json.loads(exc.body or "{}").get("message") or str(exc.body)
    except ValueError:
        return str(exc.body)
