"""The kubernetes backend against a real control plane (etcd, apiserver, controller-manager, scheduler)
with a simulated node (tests/kubernetes/nodesim.py): the objects it creates as the apiserver stores
them, a group through the launcher's HTTP API, the deadline, cancel, the sweep after a crash, and
nothing left behind. The simulated node takes each pod's exit code, run time and log from its
`veri.test/*` annotations, which the backend writes from the launch's labels (`test/exit-code` ...)."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from kubernetes import client

from testkit.kubernetes_cluster import KubeCluster
from veri.core import envs
from veri.core.episodes import RolloutStatus
from veri.core.harness import rollout_env
from veri.core.launch import GroupLaunch, LaunchResult, RolloutLaunch
from veri.services.launcher.app import create_app
from veri.services.launcher.kubernetes import objects
from veri.services.launcher.kubernetes.backend import KubernetesBackend
from veri.services.launcher.settings import LauncherSettings

KEY = "sk-test-key-for-secret"
IMAGE = "veri/harness-sim:test"  # the simulated node runs no image


@pytest.fixture
def backend(k8s_cluster: KubeCluster, k8s_namespace: str, tmp_path: Path) -> Iterator[KubernetesBackend]:
    made = KubernetesBackend(namespace=k8s_namespace, launcher_id=f"t-{secrets.token_hex(3)}",
                             output_root=tmp_path, runtime_class="gvisor", kubeconfig=k8s_cluster.kubeconfig,
                             max_sandboxes=16, proxy_selector={"app.kubernetes.io/name": "veri-proxy"})
    yield made
    made.close()


def launch(rollout_id: str, *, exit_code: int = 0, run_s: float = 0.3, timeout_s: float = 30,
           log: str = "") -> RolloutLaunch:
    env = rollout_env(proxy_base_url="http://proxy:8000", rollout_id=rollout_id, api_key=KEY, model="tiny",
                      task={"prompt": "p"}, task_index=0, rollout_index=0, max_turns=2)
    return RolloutLaunch(rollout_id=rollout_id, image=IMAGE, env=env, timeout_s=timeout_s, labels={
        "test/exit-code": str(exit_code), "test/run-seconds": str(run_s), "test/log": log or f"log of {rollout_id}"})


def left_behind(backend: KubernetesBackend) -> dict[str, list[str]]:
    ns, selector = backend.pod.namespace, backend.selector
    return {
        "jobs": [j.metadata.name for j in backend.batch.list_namespaced_job(ns, label_selector=selector).items],
        "pods": [p.metadata.name for p in backend.core.list_namespaced_pod(ns, label_selector=selector).items],
        "secrets": [s.metadata.name for s in backend.core.list_namespaced_secret(ns, label_selector=selector).items],
    }


def wait_until_clean(backend: KubernetesBackend, timeout_s: float = 120) -> None:  # a loaded box's GC
    deadline = time.monotonic() + timeout_s
    while any((left := left_behind(backend)).values()):
        assert time.monotonic() < deadline, f"left behind after {timeout_s}s: {left}"
        time.sleep(0.2)


def test_objects_as_the_apiserver_stores_them(backend: KubernetesBackend, tmp_path: Path) -> None:
    """While a rollout runs: its Job, pod, Secret and the NetworkPolicies, read back from the API."""
    ns = backend.pod.namespace
    rollout = launch("objects-r0", run_s=4, log="hello from the harness")
    name = objects.object_name(rollout.rollout_id)

    async def run_and_inspect() -> tuple[LaunchResult, client.V1Job, client.V1Pod, client.V1Secret]:
        task = asyncio.ensure_future(backend.run(rollout, tmp_path / "step" / "r0"))
        while True:
            pods = backend.core.list_namespaced_pod(ns, label_selector=f"job-name={name}").items
            if pods and pods[0].status.phase == "Running":
                break
            assert not task.done(), task.result()
            await asyncio.sleep(0.1)
        job = backend.batch.read_namespaced_job(name, ns)
        secret = backend.core.read_namespaced_secret(name, ns)
        return await task, job, pods[0], secret

    result, job, pod, secret = asyncio.run(run_and_inspect())
    assert result.status is RolloutStatus.COMPLETED and result.exit_code == 0, result
    assert "hello from the harness" in result.stderr_tail
    assert result.output_dir == str(tmp_path / "step" / "r0") and Path(result.output_dir).is_dir()

    assert job.spec.backoff_limit == 0 and job.spec.active_deadline_seconds == 30
    spec = pod.spec
    (container,) = spec.containers
    assert spec.runtime_class_name == "gvisor" and spec.automount_service_account_token is False
    assert spec.security_context.run_as_non_root and spec.security_context.run_as_user == 1000
    assert container.security_context.read_only_root_filesystem is True
    assert container.security_context.capabilities.drop == ["ALL"]
    assert container.resources.limits == {"cpu": "1", "memory": "2Gi"}
    assert KEY not in str(pod.to_dict()) and KEY not in str(job.to_dict())
    env = {e.name: e for e in container.env}
    assert env[envs.OPENAI_API_KEY].value_from.secret_key_ref.name == name
    (output,) = [m for m in container.volume_mounts if m.mount_path == "/veri/output"]
    assert output.sub_path == "step/r0"
    (owner,) = secret.metadata.owner_references
    assert (owner.kind, owner.uid) == ("Job", job.metadata.uid)

    policies = client.NetworkingV1Api(backend.api).list_namespaced_network_policy(ns).items
    by_egress = {p.spec.pod_selector.match_labels["veri.egress"]: p for p in policies}
    assert set(by_egress) == {"web", "none", "offline"}
    assert by_egress.pop("offline").spec.egress is None  # a task pod's verifier: no egress rule, nothing out
    for policy in by_egress.values():
        assert policy.spec.policy_types == ["Ingress", "Egress"] and not policy.spec.ingress
        assert policy.spec.egress[0].ports[0].port == 8000
        assert policy.spec.egress[0].to[0].pod_selector.match_labels == {"app.kubernetes.io/name": "veri-proxy"}
    assert not any(peer.ip_block for rule in by_egress["none"].spec.egress for peer in rule.to)
    assert pod.metadata.labels["veri.egress"] == "web"
    wait_until_clean(backend)


def test_group_through_the_launcher_api(backend: KubernetesBackend, tmp_path: Path) -> None:
    """Exit 0, exit 3 and a rollout past its deadline, through POST /v1/groups; statuses, metrics and
    no object left."""
    group = GroupLaunch(max_parallel=8, launches=[
        *(launch(f"ok-{i}") for i in range(4)),
        launch("fails", exit_code=3, log="Traceback: boom"),
        launch("hangs", run_s=120, timeout_s=2),
    ])
    settings = LauncherSettings(backend="kubernetes", output_root=tmp_path, max_parallel_rollouts=16)
    with TestClient(create_app(settings, backend), client=("127.0.0.1", 50000)) as http:
        answer = http.post("/v1/groups", json=group.model_dump(mode="json"), params={"subdir": "step-1"})
        metrics = http.get("/metrics").text
    assert answer.status_code == 200, answer.text
    results = {r["rollout_id"]: LaunchResult.model_validate(r) for r in answer.json()}
    for i in range(4):
        assert results[f"ok-{i}"].status is RolloutStatus.COMPLETED and results[f"ok-{i}"].exit_code == 0
    assert results["fails"].status is RolloutStatus.FAILED and results["fails"].exit_code == 3
    assert "Traceback: boom" in results["fails"].stderr_tail and results["fails"].infrastructure_error is None
    hangs = results["hangs"]
    assert hangs.status is RolloutStatus.TRUNCATED and hangs.exit_code is None, hangs
    assert "timeout_s=2" in hangs.stderr_tail
    assert 'veri_launcher_sandbox_failures_total{backend="kubernetes",reason="timeout"} 1.0' in metrics
    assert 'veri_launcher_sandbox_failures_total{backend="kubernetes",reason="exit_nonzero"} 1.0' in metrics
    assert Path(results["ok-0"].output_dir or "") == tmp_path / "step-1" / "ok-0"
    wait_until_clean(backend)


def test_cancel_deletes_the_running_jobs(backend: KubernetesBackend, tmp_path: Path) -> None:
    long_s = 600  # neither the pods nor the Jobs' deadline would end them during the test

    async def start_then_cancel() -> None:
        tasks = [asyncio.ensure_future(backend.run(launch(f"long-{i}", run_s=long_s, timeout_s=long_s),
                                                   tmp_path / f"long-{i}"))
                 for i in range(3)]
        deadline = time.monotonic() + 120
        while len([p for p in backend.core.list_namespaced_pod(backend.pod.namespace,
                                                               label_selector=backend.selector).items
                   if p.status.phase == "Running"]) < 3:
            assert time.monotonic() < deadline, "the pods never ran"
            await asyncio.sleep(0.1)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with pytest.raises(asyncio.CancelledError):
                await task

    started = time.monotonic()
    asyncio.run(start_then_cancel())
    wait_until_clean(backend)
    assert time.monotonic() - started < long_s  # removed by the cancel, not ended by themselves


def test_sweep_after_a_launcher_crash(backend: KubernetesBackend, k8s_cluster: KubeCluster, tmp_path: Path) -> None:
    """Objects a dead launcher left (Jobs mid-run, a Secret whose Job was never made) are removed by the
    next launcher with the same id at its start, and only those."""
    for i in range(3):
        rollout = launch(f"crashed-{i}", run_s=120)
        (tmp_path / rollout.rollout_id).mkdir()
        name = objects.object_name(rollout.rollout_id)
        backend._create(rollout, name, "web", objects.job_manifest(rollout, name, backend.pod, backend.output,
                                                                   rollout.rollout_id, "web"))
    orphan = launch("orphan-secret")
    backend.core.create_namespaced_secret(backend.pod.namespace, objects.secret_manifest(
        orphan, objects.object_name(orphan.rollout_id), backend.pod, "web"))
    other = KubernetesBackend(namespace=backend.pod.namespace, launcher_id="someone-else", output_root=tmp_path,
                              kubeconfig=k8s_cluster.kubeconfig)
    bystander = launch("bystander", run_s=120)
    name = objects.object_name(bystander.rollout_id)
    other._create(bystander, name, "web", objects.job_manifest(bystander, name, other.pod, other.output, "bystander",
                                                               "web"))

    restarted = KubernetesBackend(namespace=backend.pod.namespace, launcher_id=backend.pod.launcher_id,
                                  output_root=tmp_path, kubeconfig=k8s_cluster.kubeconfig)
    try:
        assert asyncio.run(restarted.remove_leftovers()) == 4
        wait_until_clean(restarted)
        assert left_behind(other)["jobs"] == [objects.object_name("bystander")]
        assert asyncio.run(other.remove_leftovers()) == 1
        wait_until_clean(other)
    finally:
        restarted.close()
        other.close()


def test_refusals_name_the_fix(k8s_cluster: KubeCluster, k8s_namespace: str, tmp_path: Path) -> None:
    from veri.services.launcher.errors import SandboxUnavailable

    with pytest.raises(SandboxUnavailable, match="kubectl create namespace no-such-ns"):
        KubernetesBackend(namespace="no-such-ns", output_root=tmp_path, kubeconfig=k8s_cluster.kubeconfig)
    with pytest.raises(SandboxUnavailable, match="no RuntimeClass 'kata'.*runtimeclass.yaml"):
        KubernetesBackend(namespace=k8s_namespace, output_root=tmp_path, runtime_class="kata",
                          kubeconfig=k8s_cluster.kubeconfig)
