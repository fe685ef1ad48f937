"""Kubernetes fixtures: a real control plane with a simulated node, and (where it can run) a real kubelet.

The binaries come from scripts/k8s/build.sh (`make k8s`). `make test` starts that build in the
background and these tests run last, so the ~7 min build overlaps the rest of the suite; the fixture
waits for it. Without the binaries a local run skips with the reason; under CI=true it fails.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kubernetes.cluster import (
    KUBELET_NODE,
    SIM_NODE,
    BuildUnavailable,
    ControlPlane,
    KubeCluster,
    KubeletNode,
    KubeletUnavailable,
    wait_for_build,
)

HERE = Path(__file__).resolve().parent
BUILD_WAIT_SECONDS = 30 * 60
RUNTIME_CLASS = "gvisor"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run tests/kubernetes after everything else: the background Go build gets the whole suite's time."""
    items.sort(key=lambda item: item.path.is_relative_to(HERE))


def _binaries_or_skip() -> None:
    try:
        wait_for_build(BUILD_WAIT_SECONDS)
    except BuildUnavailable as err:
        if os.environ.get("CI") == "true":
            pytest.fail(str(err))
        pytest.skip(str(err))


def wait_for(what: str, check, timeout: float = 30.0, every: float = 0.2):  # type: ignore[no-untyped-def]
    """Poll `check()` until it returns something truthy; that value is returned."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout:.0f} s")
        time.sleep(every)


@pytest.fixture(scope="session")
def k8s_cluster() -> Iterator[KubeCluster]:
    """Control plane + the simulated node "sim-node-0", with the RuntimeClass `gvisor` (handler runsc)."""
    _binaries_or_skip()
    from kubernetes import client

    plane = ControlPlane()
    cluster = plane.start()
    try:
        plane.spawn_node_simulator(SIM_NODE)
        core = client.CoreV1Api(cluster.api_client())

        def node_ready() -> bool:
            plane.check_alive()
            nodes = core.list_node(field_selector=f"metadata.name={SIM_NODE}").items
            conditions = nodes[0].status.conditions or [] if nodes else []
            return any(c.type == "Ready" and c.status == "True" for c in conditions)

        wait_for("the simulated node Ready", node_ready, timeout=120)
        # What a cluster for veri must have (README): the `gvisor` RuntimeClass, handled by runsc on the nodes.
        client.NodeV1Api(cluster.api_client()).create_runtime_class(
            {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": RUNTIME_CLASS},
             "handler": "runsc"})
        cluster.nodes = [SIM_NODE]
        yield cluster
    finally:
        plane.stop()


def _namespace(cluster: KubeCluster) -> Iterator[str]:
    from kubernetes import client

    core = client.CoreV1Api(cluster.api_client())
    name = f"t-{secrets.token_hex(4)}"
    core.create_namespace({"metadata": {"name": name}})

    def token_ready() -> bool:
        accounts = core.list_namespaced_service_account(name, field_selector="metadata.name=default").items
        return bool(accounts and accounts[0].secrets)

    # Pods are refused until the service-account and token controllers have filled the namespace.
    wait_for(f"namespace {name}'s default service account token", token_ready, timeout=120)
    yield name
    core.delete_namespace(name)


@pytest.fixture
def k8s_namespace(k8s_cluster: KubeCluster) -> Iterator[str]:
    """A fresh namespace per test (its default service account and token ready), deleted after."""
    yield from _namespace(k8s_cluster)


@pytest.fixture(scope="session")
def k8s_kubelet_cluster() -> Iterator[KubeCluster]:
    """Its own control plane + our kubelet on the host's Docker ("kubelet-node-0"), RuntimeClass `gvisor` -> runsc.

    Skips with the reason where the host cannot run it (no root, no dockerd, no runsc in Docker).
    """
    _binaries_or_skip()
    try:
        KubeletNode.check_host()
    except KubeletUnavailable as err:
        pytest.skip(f"real-kubelet tier: {err}")
    from kubernetes import client

    plane = ControlPlane()
    cluster = plane.start()
    kubelet = KubeletNode(plane)
    try:
        try:
            kubelet.start()
        except KubeletUnavailable as err:
            pytest.skip(f"real-kubelet tier: {err}")
        api = cluster.api_client()
        core = client.CoreV1Api(api)

        def node_ready() -> bool:
            plane.check_alive()
            nodes = core.list_node(field_selector=f"metadata.name={KUBELET_NODE}").items
            conditions = nodes[0].status.conditions or [] if nodes else []
            return any(c.type == "Ready" and c.status == "True" for c in conditions)

        wait_for("the kubelet's node Ready", node_ready, timeout=180, every=0.5)
        client.NodeV1Api(api).create_runtime_class(
            {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": RUNTIME_CLASS},
             "handler": "runsc"})
        cluster.nodes = [KUBELET_NODE]
        yield cluster
        # Let the kubelet stop what it runs (the namespaces' deletion may still be under way).
        for pod in core.list_pod_for_all_namespaces().items:
            core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
        with contextlib.suppress(TimeoutError):
            wait_for("the kubelet's pods gone", lambda: not core.list_pod_for_all_namespaces().items, timeout=30)
    finally:
        plane.stop_processes()
        kubelet.stop()
        plane.stop()


@pytest.fixture
def k8s_kubelet_namespace(k8s_kubelet_cluster: KubeCluster) -> Iterator[str]:
    """A fresh namespace on the real-kubelet cluster, deleted after."""
    yield from _namespace(k8s_kubelet_cluster)
