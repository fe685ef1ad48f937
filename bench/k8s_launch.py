"""Rollouts as Kubernetes Jobs at scale: N rollouts (default 256) through the kubernetes launcher
backend on the test control plane (real etcd, apiserver, controller-manager, scheduler) with
simulated nodes (tests/kubernetes/nodesim.py: each pod Running, then exit 0 after --run-seconds).

Prints: Jobs created per second (the backend's paced creation: Secret + Job + owner patch each),
launch -> pod Running p50/p95 (from the rollout's call: pacing queue, creation, the Job controller,
the scheduler, the node), objects created -> pod Running, the group's wall time, and the objects left
behind once the deletes have landed (must be 0). Everything (control plane, nodes, bench) shares
this machine's cores: the figures are the control plane's on this box, not a cluster's.

`--kubelet`: the real-kubelet tier instead, launch -> entrypoint of the kubernetes backend vs the docker
backend in the same run (bench/k8s_kubelet_launch.py; --rollouts defaults to 16 there).

    make k8s    # the binaries, once (build/k8s/bin)
    .venv/bin/python bench/k8s_launch.py [--rollouts 256] [--nodes 2] [--create-per-second 50]
    .venv/bin/python bench/k8s_launch.py --kubelet [--rollouts 16] [--warmup 1]
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kubernetes import client  # noqa: E402

from testkit.kubernetes_cluster import ControlPlane, wait_for_build  # noqa: E402
from veri.core.harness import rollout_env  # noqa: E402
from veri.core.launch import GroupLaunch, RolloutLaunch, SandboxLimits  # noqa: E402
from veri.services.launcher.group import run_group  # noqa: E402
from veri.services.launcher.kubernetes.backend import KubernetesBackend  # noqa: E402


def launches(count: int, run_seconds: float) -> list[RolloutLaunch]:
    out = []
    for i in range(count):
        rollout_id = f"bench-{i}"
        env = rollout_env(proxy_base_url="http://proxy:8000", rollout_id=rollout_id, api_key=secrets.token_hex(8),
                          model="tiny", task={"prompt": "p"}, task_index=i // 8, rollout_index=i % 8, max_turns=2)
        out.append(RolloutLaunch(rollout_id=rollout_id, image="veri/harness-bench:sim", env=env, timeout_s=300,
                                 limits=SandboxLimits(cpus=0.25, memory_mb=256),
                                 labels={"test/run-seconds": str(run_seconds)}))
    return out


def wait(what: str, check, timeout: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.2)


def left_behind(backend: KubernetesBackend) -> int:
    ns, selector = backend.pod.namespace, backend.selector
    return (len(backend.batch.list_namespaced_job(ns, label_selector=selector).items)
            + len(backend.core.list_namespaced_pod(ns, label_selector=selector).items)
            + len(backend.core.list_namespaced_secret(ns, label_selector=selector).items))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=None, help="default 256; 16 with --kubelet")
    parser.add_argument("--nodes", type=int, default=2, help="simulated nodes (64 CPUs, 500 pods each)")
    parser.add_argument("--run-seconds", type=float, default=1.0, help="each simulated harness's run")
    parser.add_argument("--create-per-second", type=float, default=50.0)
    parser.add_argument("--create-burst", type=int, default=50)
    parser.add_argument("--kubelet", action="store_true",
                        help="the real-kubelet tier: launch -> entrypoint vs the docker backend")
    parser.add_argument("--warmup", type=int, default=1, help="--kubelet: uncounted rollouts per backend first")
    args = parser.parse_args()
    if args.kubelet:
        from bench.k8s_kubelet_launch import run as kubelet_vs_docker

        return kubelet_vs_docker(args.rollouts or 16, args.warmup, network="veri-bench-rollouts")
    args.rollouts = args.rollouts or 256

    wait_for_build(30 * 60)
    plane = ControlPlane()
    cluster = plane.start()
    try:
        for n in range(args.nodes):
            plane.spawn_node_simulator(f"sim-node-{n}")
        api = cluster.api_client()
        core = client.CoreV1Api(api)
        wait(f"{args.nodes} nodes", lambda: len(core.list_node().items) >= args.nodes, 60)
        client.NodeV1Api(api).create_runtime_class({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                                                    "metadata": {"name": "gvisor"}, "handler": "runsc"})
        core.create_namespace({"metadata": {"name": "bench"}})
        wait("the default service account token", lambda: any(
            a.secrets for a in core.list_namespaced_service_account("bench").items), 60)
        with tempfile.TemporaryDirectory(prefix="veri-k8s-bench-") as outputs:
            backend = KubernetesBackend(namespace="bench", launcher_id="bench", output_root=Path(outputs),
                                        kubeconfig=cluster.kubeconfig, max_sandboxes=args.rollouts,
                                        create_per_second=args.create_per_second, create_burst=args.create_burst)
            group = GroupLaunch(launches=launches(args.rollouts, args.run_seconds), max_parallel=args.rollouts)
            started = time.time()
            results = asyncio.run(run_group(backend, group, Path(outputs)))
            wall = time.time() - started
            completed = sum(r.status == "completed" for r in results)
            wait("every object deleted", lambda: left_behind(backend) == 0, 120)
            created = sorted(backend.created_at)
            running = sorted(backend.launch_to_running)
            after_create = sorted(backend.created_to_running)
            rate = (len(created) - 1) / (created[-1] - created[0]) if len(created) > 1 else float("nan")
            q = statistics.quantiles(running, n=20) if len(running) > 1 else [float("nan")] * 19
            print(f"k8s launch: {args.rollouts} rollouts, {args.nodes} simulated nodes, "
                  f"pacing {args.create_per_second:g}/s burst {args.create_burst}, harness run {args.run_seconds:g} s")
            print(f"  completed            {completed}/{args.rollouts}")
            print(f"  Jobs created/s       {rate:.1f}")
            print(f"  launch->Running p50  {statistics.median(running):.2f} s   p95 {q[18]:.2f} s")
            q2 = statistics.quantiles(after_create, n=20) if len(after_create) > 1 else [float("nan")] * 19
            print(f"  created->Running p50 {statistics.median(after_create):.2f} s   p95 {q2[18]:.2f} s"
                  "   (Job controller, scheduler, node)")
            print(f"  group wall time      {wall:.1f} s")
            print(f"  objects left behind  {left_behind(backend)}")
            backend.close()
            return 0 if completed == args.rollouts else 1
    finally:
        plane.stop()


if __name__ == "__main__":
    sys.exit(main())
