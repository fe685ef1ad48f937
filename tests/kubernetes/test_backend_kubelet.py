"""The kubernetes backend on the real-kubelet tier: a real harness image (tests/sandbox/launcher's
harness_main.py as a bundle) runs as Jobs under the `gvisor` RuntimeClass (runsc) on the host's Docker;
its output folder comes back through the hostPath subPath, its exit code and log through the API, and
nothing is left behind. (The deadline, cancel and the sweep: test_backend.py, on the simulated node.)"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.kubernetes_cluster import KubeCluster
from veri.core.episodes import RolloutStatus
from veri.core.harness import rollout_env
from veri.core.launch import GroupLaunch, LaunchResult, RolloutLaunch, SandboxLimits
from veri.services.launcher.group import run_group
from veri.services.launcher.kubernetes.backend import KubernetesBackend

pytestmark = pytest.mark.needs("docker")

HARNESS_MAIN = Path(__file__).resolve().parents[1] / "sandbox" / "launcher" / "harness_main.py"


@pytest.fixture(scope="module")
def harness_image(tmp_path_factory: pytest.TempPathFactory) -> str:
    docker = pytest.importorskip("docker")
    from veri.tools.harness.build import build_bundle_image

    bundle = tmp_path_factory.mktemp("bundle") / "sandbox_test"
    bundle.mkdir()
    (bundle / "veri-harness.toml").write_text('name = "sandbox_test"\nentrypoint = ["python", "main.py"]\n')
    shutil.copy(HARNESS_MAIN, bundle / "main.py")
    client = docker.from_env(timeout=600)
    try:
        return build_bundle_image(bundle, client, vendor_root=tmp_path_factory.mktemp("vendor"), download=False)
    finally:
        client.close()


@pytest.fixture
def backend(k8s_kubelet_cluster: KubeCluster, k8s_kubelet_namespace: str, tmp_path: Path
            ) -> Iterator[KubernetesBackend]:
    made = KubernetesBackend(namespace=k8s_kubelet_namespace, launcher_id="kubelet-test", output_root=tmp_path,
                             kubeconfig=k8s_kubelet_cluster.kubeconfig, max_sandboxes=4)
    yield made
    made.close()


def launch(image: str, rollout_id: str, task: dict, timeout_s: float = 120) -> RolloutLaunch:
    env = rollout_env(proxy_base_url="http://proxy:8000", rollout_id=rollout_id, api_key="sk-kubelet",
                      model="tiny", task=task, task_index=0, rollout_index=0, max_turns=2)
    # A small share: the kubelet's node is this 2-core machine (requests = limits, Guaranteed).
    return RolloutLaunch(rollout_id=rollout_id, image=image, env=env, timeout_s=timeout_s,
                         limits=SandboxLimits(cpus=0.25, memory_mb=512))


def test_real_harness_under_gvisor_through_the_backend(backend: KubernetesBackend, harness_image: str,
                                                       tmp_path: Path) -> None:
    # One at a time: a gVisor pod takes ~10 s to start on this 2-core box, several at once much longer.
    group = GroupLaunch(max_parallel=1, launches=[
        launch(harness_image, "ok", {"fault": "ok", "n": 21}),
        launch(harness_image, "exit", {"fault": "exit"}),
    ])
    results: dict[str, LaunchResult] = {
        r.rollout_id: r for r in asyncio.run(run_group(backend, group, tmp_path / "step-0"))}

    ok = results["ok"]
    assert ok.status is RolloutStatus.COMPLETED and ok.exit_code == 0, ok
    assert (tmp_path / "step-0" / "ok" / "answer.txt").read_text() == "42"  # written in the sandbox
    assert "ok ok" in ok.stderr_tail
    failed = results["exit"]
    assert failed.status is RolloutStatus.FAILED and failed.exit_code == 3 and "boom" in failed.stderr_tail, failed

    ns, selector = backend.pod.namespace, backend.selector
    deadline = time.monotonic() + 60
    while (backend.batch.list_namespaced_job(ns, label_selector=selector).items
           or backend.core.list_namespaced_pod(ns, label_selector=selector).items
           or backend.core.list_namespaced_secret(ns, label_selector=selector).items):
        assert time.monotonic() < deadline, "rollout objects left behind"
        time.sleep(0.5)
