"""The test control plane itself: real apiserver/controller/scheduler semantics over the simulated node."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from testkit.kubernetes_cluster import RESYNC_PERIOD_S, SIM_NODE, KubeCluster
from tests.kubernetes.conftest import RUNTIME_CLASS, wait_for


def job_body(name: str, annotations: dict[str, str], **spec: Any) -> dict[str, Any]:
    pod_spec = {"restartPolicy": "Never", "containers": [{"name": "main", "image": "veri/test:none"}],
                **spec.pop("pod", {})}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"backoffLimit": 0, **spec,
                     "template": {"metadata": {"annotations": annotations}, "spec": pod_spec}}}


def finished_job(cluster: KubeCluster, namespace: str, name: str, timeout: int = 90) -> client.V1Job:
    """Watch the Job until the Job controller marks it Complete or Failed; past `timeout` the error carries
    what the controller-manager logged about it (its job controller logs each sync and deadline timer)."""
    batch = client.BatchV1Api(cluster.api_client())
    for event in watch.Watch().stream(batch.list_namespaced_job, namespace, field_selector=f"metadata.name={name}",
                                      timeout_seconds=timeout):
        job = event["object"]
        if any(c.type in ("Complete", "Failed") and c.status == "True" for c in job.status.conditions or []):
            return job
    job = batch.read_namespaced_job(name, namespace)
    about_it = cluster.log_tail("kube-controller-manager", mentioning=f"{namespace}/{name}")
    raise TimeoutError(
        f"job {namespace}/{name} not finished after {timeout} s; its status: {job.status.to_dict()}\n"
        f"kube-controller-manager.log on it:\n{about_it}\n"
        f"kube-controller-manager.log ends:\n{cluster.log_tail('kube-controller-manager', lines=15)}")


def job_pods(core: client.CoreV1Api, namespace: str, name: str) -> list[client.V1Pod]:
    return core.list_namespaced_pod(namespace, label_selector=f"job-name={name}").items


def test_job_runs_on_the_simulated_node_and_its_log_comes_through_the_api(k8s_cluster: KubeCluster,
                                                                         k8s_namespace: str) -> None:
    api = k8s_cluster.api_client()
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    batch.create_namespaced_job(k8s_namespace, job_body("ok", {"veri.test/log": "first\nsecond\nthird\n"}))

    job = finished_job(k8s_cluster, k8s_namespace, "ok")
    assert job.status.succeeded == 1 and not job.status.failed
    [pod] = job_pods(core, k8s_namespace, "ok")
    assert pod.spec.node_name == SIM_NODE  # placed by the real scheduler
    assert pod.status.phase == "Succeeded"
    assert pod.status.container_statuses[0].state.terminated.exit_code == 0
    # apiserver -> the node's HTTPS endpoint from Node.status.daemonEndpoints
    name = pod.metadata.name
    assert core.read_namespaced_pod_log(name, k8s_namespace) == "first\nsecond\nthird\n"
    assert core.read_namespaced_pod_log(name, k8s_namespace, tail_lines=1) == "third\n"


def test_a_failing_container_fails_the_job_with_its_exit_code(k8s_cluster: KubeCluster, k8s_namespace: str) -> None:
    api = k8s_cluster.api_client()
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    batch.create_namespaced_job(k8s_namespace, job_body("bad", {"veri.test/exit-code": "3"}))

    job = finished_job(k8s_cluster, k8s_namespace, "bad")
    assert job.status.failed == 1 and not job.status.succeeded
    assert [c.reason for c in job.status.conditions if c.type == "Failed"] == ["BackoffLimitExceeded"]
    [pod] = job_pods(core, k8s_namespace, "bad")
    assert pod.status.phase == "Failed"
    assert pod.status.container_statuses[0].state.terminated.exit_code == 3


def test_active_deadline_is_enforced_by_the_job_controller(k8s_cluster: KubeCluster, k8s_namespace: str) -> None:
    api = k8s_cluster.api_client()
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    # The pod would run far past the watch: only the deadline can end the Job within it.
    batch.create_namespaced_job(k8s_namespace, job_body("slow", {"veri.test/run-seconds": "600"},
                                                        activeDeadlineSeconds=2))

    # 2 s, or up to 2 x RESYNC_PERIOD_S more where 1.20 lost its deadline timer (cluster.py); the rest is
    # for a loaded box's control plane.
    job = finished_job(k8s_cluster, k8s_namespace, "slow", timeout=2 + 2 * RESYNC_PERIOD_S + 90)
    assert [c.reason for c in job.status.conditions if c.type == "Failed"] == ["DeadlineExceeded"]
    # The controller deletes the running pod; the node removes it.
    wait_for("the deadline-exceeded pod gone", lambda: not job_pods(core, k8s_namespace, "slow"), timeout=60)


def test_foreground_deletion_removes_the_pods_before_the_job(k8s_cluster: KubeCluster, k8s_namespace: str) -> None:
    api = k8s_cluster.api_client()
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    batch.create_namespaced_job(k8s_namespace, job_body("long", {"veri.test/run-seconds": "120"}))
    wait_for("the pod Running", lambda: [p for p in job_pods(core, k8s_namespace, "long")
                                         if p.status.phase == "Running"])

    response = batch.delete_namespaced_job("long", k8s_namespace, propagation_policy="Foreground",
                                           _preload_content=False)
    # Foreground: the answer is the Job itself, kept (deletionTimestamp + the foregroundDeletion finalizer)
    # until the garbage collector has removed its pods.
    job = json.loads(response.data)
    assert job["kind"] == "Job" and job["metadata"]["deletionTimestamp"]
    assert "foregroundDeletion" in job["metadata"]["finalizers"]

    def job_gone() -> bool:
        try:
            batch.read_namespaced_job("long", k8s_namespace)
        except ApiException as err:
            if err.status == 404:
                return True
            raise
        return False

    wait_for("the Job deleted", job_gone, timeout=60)
    assert job_pods(core, k8s_namespace, "long") == []


def test_runtime_class_is_admitted_and_an_unknown_one_refused(k8s_cluster: KubeCluster, k8s_namespace: str) -> None:
    api = k8s_cluster.api_client()
    core = client.CoreV1Api(api)
    assert client.NodeV1Api(api).read_runtime_class(RUNTIME_CLASS).handler == "runsc"

    def pod(name: str, runtime_class: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                "spec": {"restartPolicy": "Never", "runtimeClassName": runtime_class,
                         "containers": [{"name": "main", "image": "veri/test:none"}]}}

    core.create_namespaced_pod(k8s_namespace, pod("sandboxed", RUNTIME_CLASS))
    wait_for("the gvisor pod Succeeded",
             lambda: core.read_namespaced_pod("sandboxed", k8s_namespace).status.phase == "Succeeded")
    assert core.read_namespaced_pod("sandboxed", k8s_namespace).spec.runtime_class_name == RUNTIME_CLASS

    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(k8s_namespace, pod("nowhere", "no-such-runtime"))
    assert refused.value.status == 403
    assert 'RuntimeClass "no-such-runtime" not found' in json.loads(refused.value.body)["message"]


def test_network_policy_round_trips(k8s_cluster: KubeCluster, k8s_namespace: str) -> None:
    networking = client.NetworkingV1Api(k8s_cluster.api_client())
    policy = {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "rollouts"},
        "spec": {
            "podSelector": {"matchLabels": {"veri.dev/role": "rollout"}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": [{"to": [{"podSelector": {"matchLabels": {"app": "proxy"}}}],
                        "ports": [{"protocol": "TCP", "port": 8100}]},
                       {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}}]}],
        },
    }
    networking.create_namespaced_network_policy(k8s_namespace, policy)

    stored = networking.read_namespaced_network_policy("rollouts", k8s_namespace).to_dict()["spec"]
    assert stored["pod_selector"]["match_labels"] == {"veri.dev/role": "rollout"}
    assert stored["policy_types"] == ["Ingress", "Egress"]
    assert not stored["ingress"]
    first, second = stored["egress"]
    assert first["to"][0]["pod_selector"]["match_labels"] == {"app": "proxy"}
    assert first["ports"] == [{"protocol": "TCP", "port": 8100, "end_port": None}]
    assert second["to"][0]["ip_block"] == {"cidr": "0.0.0.0/0", "_except": ["10.0.0.0/8"]}

    sideways = {**policy, "metadata": {"name": "bad"}, "spec": {**policy["spec"], "policyTypes": ["Sideways"]}}
    with pytest.raises(ApiException) as refused:  # validated by the apiserver, not just stored
        networking.create_namespaced_network_policy(k8s_namespace, sideways)
    assert refused.value.status == 422


def test_kubectl_from_debian_talks_to_it(k8s_cluster: KubeCluster) -> None:
    version = subprocess.run([*k8s_cluster.kubectl, "version", "--short"], capture_output=True, text=True, check=True)
    assert "Client Version: v1.20" in version.stdout and "Server Version: v1.20.2" in version.stdout
    nodes = subprocess.run([*k8s_cluster.kubectl, "get", "nodes", "-o", "name"], capture_output=True, text=True,
                           check=True)
    assert nodes.stdout.split() == [f"node/{SIM_NODE}"]


# -- the real-kubelet tier ---------------------------------------------------------------------------------

def container_runtime(pod: str, container: str) -> str:
    """Docker's view of a pod's container: the runtime it was created with."""
    ids = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=io.kubernetes.pod.name={pod}",
                          "--filter", f"label=io.kubernetes.container.name={container}"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert len(ids) == 1, f"{pod}/{container}: containers {ids}"
    return subprocess.run(["docker", "inspect", "--format", "{{.HostConfig.Runtime}}", ids[0]],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_a_gvisor_job_runs_under_runsc_on_the_real_kubelet(k8s_kubelet_cluster: KubeCluster,
                                                           k8s_kubelet_namespace: str) -> None:
    api = k8s_kubelet_cluster.api_client()
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    namespace = k8s_kubelet_namespace
    container = {"name": "main", "image": "veri/os-base:latest", "imagePullPolicy": "Never",
                 "command": ["sh", "-c", "echo kernel: $(cat /proc/version)"]}
    for name, runtime_class in (("sandboxed", {"runtimeClassName": RUNTIME_CLASS}), ("plain", {})):
        batch.create_namespaced_job(namespace, job_body(name, {}, pod={
            "containers": [container], "automountServiceAccountToken": False, **runtime_class}))

    for name in ("sandboxed", "plain"):
        # ~10 s on a quiet host; minutes at load 20
        job = finished_job(k8s_kubelet_cluster, namespace, name, timeout=300)
        [pod] = job_pods(core, namespace, name)
        assert job.status.succeeded == 1, core.read_namespaced_pod_log(pod.metadata.name, namespace)
        assert pod.spec.node_name == k8s_kubelet_cluster.nodes[0]
    [sandboxed] = job_pods(core, namespace, "sandboxed")
    [plain] = job_pods(core, namespace, "plain")
    # The RuntimeClass handler reached Docker: the pod's container (and its sandbox) ran under gVisor.
    assert container_runtime(sandboxed.metadata.name, "main") == "runsc"
    assert container_runtime(sandboxed.metadata.name, "POD") == "runsc"
    assert container_runtime(plain.metadata.name, "main") == "runc"
    # The kernel the process saw: gVisor's, not the host's (the log comes from the kubelet via the apiserver).
    host_kernel = Path("/proc/version").read_text().strip()
    sandboxed_log = core.read_namespaced_pod_log(sandboxed.metadata.name, namespace)
    assert sandboxed_log.startswith("kernel: Linux version") and host_kernel not in sandboxed_log
    assert core.read_namespaced_pod_log(plain.metadata.name, namespace).strip() == f"kernel: {host_kernel}"
