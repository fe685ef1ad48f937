"""Launch-to-entrypoint on the real-kubelet tier: the kubernetes backend vs the docker backend, same run.

One bundle image (tests/kubernetes/bundles/launch_probe: bash writes $EPOCHREALTIME into its output
folder as its first and only act) runs N times through each backend, interleaved one rollout at a time
(kubelet, docker, docker, kubelet, ...) so load drift on the box hits both alike. Both run under runsc on
this host's Docker: the kubernetes backend through our kubelet (testkit/kubernetes_cluster.py:
kubelet_cluster, RuntimeClass `gvisor` -> runsc), the docker backend directly.

The intervals, each per rollout, on the host's clock (gVisor reads the host's):
- launch: the backend's `run()` is called (LaunchResult.started_at). One rollout at a time, so no
  queueing for a slot or the creation pacer.
- launch -> entrypoint: until the probe's timestamp. kubernetes: Secret + Job + the Secret's owner patch
  (3 API calls), the Job controller makes the pod, the scheduler binds it, the kubelet sees it, mounts
  the emptyDirs and the output folder (hostPath subPath) and reads the Secret for the environment,
  starts the pod's sandbox (pause) and the harness container under runsc, bash starts. docker: the image's
  labels read, the output and log folders made, the container created and started under runsc, the
  stdio wrapper's exec, bash starts. Image already on the node (the host's Docker) for both: no pull.
- launch -> result: until `run()` returns: the exit seen (kubernetes: the pod and Job watches; docker:
  the container's wait), the log tail read, the output folder capped, the sandbox's removal done
  (docker) or its foreground delete requested (kubernetes: it lands after, counted below).
- left behind: once the deletes have landed (up to 60 s), the kubernetes backend's Jobs, pods and
  Secrets plus the kubelet's still-running containers of the namespace; the docker backend's
  containers. Both must be 0. Exited kubelet containers awaiting its garbage collection (every minute)
  are reported apart; the tier's teardown removes them.

    make k8s    # the binaries, once (build/k8s/bin)
    .venv/bin/python bench/k8s_launch.py --kubelet [--rollouts 16]   (or this file directly)
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import docker  # noqa: E402

from testkit.kubernetes_cluster import KubeCluster, fresh_namespace, kubelet_cluster, wait_for, wait_for_build  # noqa: E402
from veri.core.harness import rollout_env  # noqa: E402
from veri.core.launch import GroupLaunch, LaunchResult, RolloutLaunch, SandboxLimits  # noqa: E402
from veri.services.launcher.backend import SandboxBackend  # noqa: E402
from veri.services.launcher.docker_backend import DockerBackend, ensure_rollouts_network  # noqa: E402
from veri.services.launcher.group import run_group  # noqa: E402
from veri.services.launcher.kubernetes.backend import KubernetesBackend  # noqa: E402
from veri.tools.harness.build import build_bundle_image  # noqa: E402

PROBE_BUNDLE = REPO / "tests" / "kubernetes" / "bundles" / "launch_probe"
PROBE_REPOSITORY = "veri/harness-k8s_launch_probe"  # build_bundle_image's name for it
ENTERED = "entered"  # the probe's file in its output folder
LIMITS = SandboxLimits(cpus=1.0, memory_mb=512, tmpfs_mb=64)
TIMEOUT_S = 180.0  # per rollout; a gVisor pod takes ~10 s to start on a loaded 2-core box
DELETES_LAND_S = 60.0


@dataclass
class Launched:
    """One rollout, its times on the host's clock (time.time())."""

    rollout_id: str
    status: str
    launched: float  # run() called
    entered: float | None  # the probe's timestamp; None when it never ran or wrote nothing
    done: float  # run() returned
    error: str = ""


@dataclass
class Side:
    """One backend's rollouts and what it left behind."""

    backend: str
    runs: list[Launched] = field(default_factory=list)
    left_behind: int = -1
    awaiting_gc: int = 0  # exited kubelet containers of deleted pods (its GC's business)
    # kubernetes only, from the backend's own records: launch -> Secret + Job created, -> pod Running
    # as the watch saw it (the kubelet reports Running once the container has started).
    to_created: list[float] = field(default_factory=list)
    to_running: list[float] = field(default_factory=list)

    def failures(self) -> list[Launched]:
        return [r for r in self.runs if r.status != "completed" or r.entered is None]

    def to_entry(self) -> list[float]:
        return [r.entered - r.launched for r in self.runs if r.entered is not None]

    def to_result(self) -> list[float]:
        return [r.done - r.launched for r in self.runs]


def probe_image(client: docker.DockerClient) -> tuple[str, bool]:
    """The probe bundle's image; True when this call built it (then the caller removes it)."""
    before = {tag for image in client.images.list(name=PROBE_REPOSITORY) for tag in image.tags}
    tag = build_bundle_image(PROBE_BUNDLE, client, download=False, log=lambda m: None)
    return tag, tag not in before


def remove_probe_image(client: docker.DockerClient, image: str) -> None:
    try:
        client.images.remove(image)
    except docker.errors.APIError as exc:  # e.g. a container still holds it: say so, leave it
        print(f"(could not remove {image}: {exc.explanation})", file=sys.stderr)


def _launch(image: str, rollout_id: str, index: int) -> RolloutLaunch:
    env = rollout_env(proxy_base_url="http://proxy:8000", rollout_id=rollout_id, api_key=uuid.uuid4().hex,
                      model="tiny", task={"prompt": "p"}, task_index=index, rollout_index=0, max_turns=1)
    return RolloutLaunch(rollout_id=rollout_id, image=image, env=env, timeout_s=TIMEOUT_S, limits=LIMITS)


def _record(result: LaunchResult) -> Launched:
    entered_file = Path(result.output_dir or "/nonexistent") / ENTERED
    try:
        entered: float | None = float(entered_file.read_text())
    except (OSError, ValueError):
        entered = None
    error = result.infrastructure_error or (result.stderr_tail[-300:] if result.status != "completed" else "")
    return Launched(rollout_id=result.rollout_id, status=str(result.status), launched=result.started_at,
                    entered=entered, done=result.started_at + result.duration_s, error=error)


async def _interleaved(backends: list[SandboxBackend], image: str, rollouts: int, warmup: int,
                       output_root: Path) -> dict[str, list[Launched]]:
    """Each rollout index once per backend, one at a time, the order flipped every index."""
    runs: dict[str, list[Launched]] = {b.name: [] for b in backends}
    for i in range(-warmup, rollouts):
        order = backends if i % 2 == 0 else backends[::-1]
        for backend in order:
            rollout_id = f"probe-{backend.name[:3]}-{'w' if i < 0 else ''}{abs(i)}"
            group = GroupLaunch(launches=[_launch(image, rollout_id, abs(i))], max_parallel=1)
            [result] = await run_group(backend, group, output_root / backend.name)
            if i >= 0:  # warm-up rollouts (first-run costs) are not counted
                runs[backend.name].append(_record(result))
    return runs


def _kubernetes_left(backend: KubernetesBackend, client: docker.DockerClient) -> tuple[int, int]:
    """(API objects + running kubelet containers of the namespace, exited ones awaiting the kubelet's GC)."""
    ns, selector = backend.pod.namespace, backend.selector
    objects = (len(backend.batch.list_namespaced_job(ns, label_selector=selector).items)
               + len(backend.core.list_namespaced_pod(ns, label_selector=selector).items)
               + len(backend.core.list_namespaced_secret(ns, label_selector=selector).items))
    containers = client.containers.list(all=True, filters={"label": f"io.kubernetes.pod.namespace={ns}"})
    running = [c for c in containers if c.status in ("created", "running", "restarting", "paused")]
    return objects + len(running), len(containers) - len(running)


def compare(cluster: KubeCluster, namespace: str, image: str, *, rollouts: int, warmup: int,
            docker_network: str, output_root: Path) -> tuple[Side, Side]:
    """The measurement (the bench and tests/kubernetes/test_kubelet_vs_docker.py): (kubernetes, docker)."""
    # Two ids: the kubelet copies a pod's labels (veri.launcher=...) onto its Docker containers.
    run_id = uuid.uuid4().hex[:6]
    client = docker.from_env(timeout=300)
    k8s = KubernetesBackend(namespace=namespace, launcher_id=f"cmp-k8s-{run_id}", output_root=output_root,
                            kubeconfig=cluster.kubeconfig, max_sandboxes=1)
    dock = DockerBackend(network=docker_network, launcher_id=f"cmp-docker-{run_id}", max_sandboxes=1,
                         host_paths={})
    kube_side, docker_side = Side(k8s.name), Side(dock.name)
    try:
        runs = asyncio.run(_interleaved([k8s, dock], image, rollouts, warmup, output_root))
        kube_side.runs, docker_side.runs = runs[k8s.name], runs[dock.name]
        counted = len(kube_side.runs)  # one at a time: the backend's records are in run order, warm-up first
        created = list(k8s.created_at)[-counted:]
        kube_side.to_created = [c - r.launched for c, r in zip(created, kube_side.runs, strict=False)]
        kube_side.to_running = list(k8s.launch_to_running)[-counted:]
        try:
            wait_for("the kubernetes rollouts' objects deleted",
                     lambda: _kubernetes_left(k8s, client)[0] == 0, timeout=DELETES_LAND_S, every=0.5)
        except TimeoutError:
            pass  # counted below
        kube_side.left_behind, kube_side.awaiting_gc = _kubernetes_left(k8s, client)
        docker_side.left_behind = len(client.containers.list(
            all=True, filters={"label": f"veri.launcher={dock.launcher_id}"}))
    finally:
        k8s.close()
        dock.close()
        client.close()
    return kube_side, docker_side


def _p(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def report(kube: Side, dock: Side) -> str:
    lines = [f"{'backend':<11} {'rollouts':>8} {'failed':>6} {'entry p50 s':>11} {'entry p95 s':>11} "
             f"{'result p50 s':>12} {'left':>4}"]
    for side in (kube, dock):
        entry, result = side.to_entry(), side.to_result()
        lines.append(f"{side.backend:<11} {len(side.runs):>8} {len(side.failures()):>6} "
                     f"{statistics.median(entry) if entry else float('nan'):>11.2f} {_p(entry, 0.95):>11.2f} "
                     f"{statistics.median(result) if result else float('nan'):>12.2f} "
                     f"{side.left_behind:>4}")
    if kube.to_created and kube.to_running:
        lines.append(f"kubernetes p50: launch->Secret+Job created {statistics.median(kube.to_created):.2f} s, "
                     f"launch->pod Running (watch) {statistics.median(kube.to_running):.2f} s")
    k_entry, d_entry = kube.to_entry(), dock.to_entry()
    if k_entry and d_entry:
        entry_ratio = statistics.median(k_entry) / statistics.median(d_entry)
        result_ratio = statistics.median(kube.to_result()) / statistics.median(dock.to_result())
        lines.append(f"kubelet/docker p50: launch->entrypoint x{entry_ratio:.1f}, launch->result x{result_ratio:.1f}")
    if kube.awaiting_gc:
        lines.append(f"({kube.awaiting_gc} exited kubelet containers of deleted pods await its garbage collection)")
    for failed in (*kube.failures(), *dock.failures())[:10]:
        lines.append(f"  failed: {failed.rollout_id}: {failed.status} {failed.error}")
    return "\n".join(lines)


def run(rollouts: int, warmup: int, network: str) -> int:
    wait_for_build(30 * 60)
    client = docker.from_env(timeout=600)
    image, built = probe_image(client)
    try:
        docker_network = ensure_rollouts_network(client, network).name
        with kubelet_cluster() as cluster, fresh_namespace(cluster) as namespace, \
                tempfile.TemporaryDirectory(prefix="veri-k8s-cmp-") as outputs:
            kube, dock = compare(cluster, namespace, image, rollouts=rollouts, warmup=warmup,
                                 docker_network=docker_network, output_root=Path(outputs))
    finally:
        if built:
            remove_probe_image(client, image)
        client.close()
    print(f"launch -> entrypoint, real kubelet (RuntimeClass gvisor -> runsc) vs docker backend (runsc), "
          f"{rollouts} rollouts each, interleaved one at a time after {warmup} warm-up each ({image}):")
    print(report(kube, dock))
    bad = kube.failures() or dock.failures() or kube.left_behind or dock.left_behind
    return 1 if bad else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=16, help="per backend")
    parser.add_argument("--warmup", type=int, default=1, help="uncounted rollouts per backend first")
    parser.add_argument("--network", default="veri-bench-rollouts",
                        help="the docker backend's rollouts network (created when missing and kept)")
    args = parser.parse_args()
    return run(args.rollouts, args.warmup, args.network)


if __name__ == "__main__":
    sys.exit(main())
