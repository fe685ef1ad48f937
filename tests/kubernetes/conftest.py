"""Kubernetes fixtures: a real control plane with a simulated node, and (where it can run) a real kubelet.

The binaries come from scripts/k8s/build.sh (`make k8s`). `make test` starts that build in the
background and these tests run last, so the ~7 min build overlaps the rest of the suite; the fixture
waits for it. Without the binaries a local run skips with the reason; under CI=true it fails.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.kubernetes_cluster import (
    RUNTIME_CLASS,
    SIM_NODE,
    BuildUnavailable,
    ControlPlane,
    KubeCluster,
    KubeletNode,
    KubeletUnavailable,
    create_runtime_class,
    fresh_namespace,
    kubelet_cluster,
    wait_for,
    wait_for_build,
    wait_node_ready,
)

HERE = Path(__file__).resolve().parent
BUILD_WAIT_SECONDS = 30 * 60
__all__ = ["RUNTIME_CLASS", "wait_for"]  # test_cluster.py imports them from here


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


@pytest.fixture(scope="session")
def k8s_cluster() -> Iterator[KubeCluster]:
    """Control plane + the simulated node "sim-node-0", with the RuntimeClass `gvisor` (handler runsc)."""
    _binaries_or_skip()
    plane = ControlPlane()
    cluster = plane.start()
    try:
        plane.spawn_node_simulator(SIM_NODE)
        wait_node_ready(plane, cluster, SIM_NODE, timeout=120)
        create_runtime_class(cluster)
        cluster.nodes = [SIM_NODE]
        yield cluster
    finally:
        plane.stop()


@pytest.fixture
def k8s_namespace(k8s_cluster: KubeCluster) -> Iterator[str]:
    """A fresh namespace per test (its default service account and token ready), deleted after."""
    with fresh_namespace(k8s_cluster) as name:
        yield name


@pytest.fixture(scope="session")
def k8s_kubelet_cluster() -> Iterator[KubeCluster]:
    """Its own control plane + our kubelet on the host's Docker ("kubelet-node-0"), RuntimeClass `gvisor` -> runsc
    (cluster.kubelet_cluster, which bench/k8s_kubelet_launch.py uses too).

    Skips with the reason where the host cannot run it (no root, no dockerd, no runsc in Docker).
    """
    _binaries_or_skip()
    try:
        KubeletNode.check_host()
    except KubeletUnavailable as err:
        pytest.skip(f"real-kubelet tier: {err}")
    with contextlib.ExitStack() as stack:
        try:
            cluster = stack.enter_context(kubelet_cluster())
        except KubeletUnavailable as err:
            pytest.skip(f"real-kubelet tier: {err}")
        yield cluster


@pytest.fixture
def k8s_kubelet_namespace(k8s_kubelet_cluster: KubeCluster) -> Iterator[str]:
    """A fresh namespace on the real-kubelet cluster, deleted after."""
    with fresh_namespace(k8s_kubelet_cluster) as name:
        yield name
