"""The real-kubelet bench's measurement at CI size (bench/k8s_kubelet_launch.py `compare`): the launch
probe bundle through the kubernetes backend (our kubelet, RuntimeClass gvisor -> runsc) and through the
docker backend (runsc), interleaved. Correctness only, never a time: both backends ran the entrypoint
(its timestamp is in each rollout's output folder), each rollout's times are in order (launch <
entrypoint < result), and neither backend left anything behind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.k8s_kubelet_launch import Side, compare, probe_image, remove_probe_image
from testkit.kubernetes_cluster import KubeCluster

pytestmark = pytest.mark.needs("docker")

ROLLOUTS = 2  # each way


@pytest.fixture(scope="module")
def probe(k8s_kubelet_cluster: KubeCluster) -> Iterator[str]:
    import docker

    client = docker.from_env(timeout=600)
    image, built = probe_image(client)
    yield image
    if built:
        # The kubelet's exited containers of the probe's (deleted) pods wait for its garbage collection,
        # every minute, and hold the image until then: remove them first (the tier's teardown would).
        for container in client.containers.list(all=True, filters={
                "ancestor": image, "label": "io.kubernetes.docker.type", "status": "exited"}):
            container.remove(v=True)
        remove_probe_image(client, image)
    client.close()


@pytest.fixture(scope="module")
def docker_network() -> str:
    import docker

    from veri.services.launcher.docker_backend import ensure_rollouts_network

    client = docker.from_env(timeout=120)
    try:
        # kept between runs, as the launcher tests' (see ensure_rollouts_network)
        return str(ensure_rollouts_network(client, "veri-test-rollouts").name)
    finally:
        client.close()


def check_side(side: Side, output_root: Path) -> None:
    assert len(side.runs) == ROLLOUTS, side
    assert not side.failures(), f"{side.backend}: {side.failures()}"
    for run in side.runs:
        assert run.entered is not None
        assert run.launched < run.entered < run.done, (side.backend, run)
        assert (output_root / side.backend / run.rollout_id / "entered").is_file()  # written in the sandbox
    assert side.left_behind == 0, f"{side.backend}: {side.left_behind} objects/containers left behind"


def test_kubelet_and_docker_backends_run_the_probe_in_the_same_run(
        k8s_kubelet_cluster: KubeCluster, k8s_kubelet_namespace: str, probe: str, docker_network: str,
        tmp_path: Path) -> None:
    kube, dock = compare(k8s_kubelet_cluster, k8s_kubelet_namespace, probe, rollouts=ROLLOUTS, warmup=0,
                         docker_network=docker_network, output_root=tmp_path)
    assert (kube.backend, dock.backend) == ("kubernetes", "docker")
    check_side(kube, tmp_path)
    check_side(dock, tmp_path)
    # Interleaved: every kubernetes rollout's span of time is apart from every docker rollout's.
    spans = sorted((r.launched, r.done) for r in (*kube.runs, *dock.runs))
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:], strict=False)), spans
