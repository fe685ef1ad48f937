"""Harbor task rollouts benchmark: what a task's own environment and its verifier cost a rollout.

On the CPU demo's tasks (config/data/harbor_cpu/train, `FROM python:3.11-slim` mapped to a local image):

  build       a task's environment image cold (a new image: a LABEL with a nonce after FROM, so every
              later layer is built) and cached (the same task again: veri's content-hash tag, no build)
  sandbox     a rollout's time outside its verifier: the task's image under runsc with its mounts, the
              agent's turn (the task's solve.sh: one command) and the clean-up, against a bundle image's
              sandbox running one command
  verifier    the verifier's time per rollout (the privileged exec, the tests piped in, test.sh, the
              reward read back) and its share of the rollout

    python bench/task_rollouts.py [--tasks 4] [--rollouts 8] [--parallel 4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import docker
import structlog

from veri.core.harbor_task import load_task
from veri.core.launch import GroupLaunch, LaunchResult, RolloutLaunch, SandboxLimits, task_environment
from veri.services.launcher.docker_backend import DockerBackend, ensure_rollouts_network
from veri.services.launcher.docker_egress import network_names
from veri.services.launcher.group import run_group
from veri.tools.harness.build import build_bundle_image
from veri.tools.tasks.build import build_task_image

REPO = Path(__file__).resolve().parents[1]
TASKS = REPO / "config/data/harbor_cpu/train"
IMAGE_MAP = {"python:3.11-slim": "veri/os-base"}
NETWORK = "veri-bench-rollouts"


def _quiet(_: str) -> None:
    pass


def fresh_copies(tasks: list[Path], into: Path) -> list[Path]:
    """Copies whose images no cache holds: a nonce LABEL right after FROM (the task is otherwise unchanged)."""
    copies = []
    for task in tasks:
        copy = into / task.name
        shutil.copytree(task, copy)
        dockerfile = copy / "environment/Dockerfile"
        first, rest = dockerfile.read_text().split("\n", 1)
        dockerfile.write_text(f"{first}\nLABEL veri.bench.nonce={uuid.uuid4().hex}\n{rest}")
        copies.append(copy)
    return copies


def timed_builds(tasks: list[Path], vendor: Path, client: docker.DockerClient) -> tuple[list[float], list[float], dict]:
    cold: list[float] = []
    cached: list[float] = []
    tags: dict[Path, str] = {}
    for task in tasks:
        for times in (cold, cached):
            started = time.monotonic()
            tags[task] = build_task_image(task, vendor, image_map=IMAGE_MAP, client=client, log=_quiet)
            times.append(time.monotonic() - started)
    return cold, cached, tags


def task_launches(tags: dict[Path, str], rollouts: int) -> list[RolloutLaunch]:
    launches = []
    for index in range(rollouts):
        task_dir, image = list(tags.items())[index % len(tags)]
        task = load_task(task_dir)
        rollout_id = f"bench-task-{index}-{uuid.uuid4().hex[:4]}"
        launches.append(RolloutLaunch(
            rollout_id=rollout_id, image=image, task_env=task_environment(task, image=image, agent="oracle"),
            env={"VERI_ROLLOUT_ID": rollout_id, "VERI_TASK": json.dumps({"task": task.name})},
            timeout_s=120, labels={"job": "bench-tasks"}))
    return launches


def bundle_launches(image: str, rollouts: int) -> list[RolloutLaunch]:
    return [RolloutLaunch(rollout_id=f"bench-bundle-{i}-{uuid.uuid4().hex[:4]}", image=image, timeout_s=120,
                          env={"VERI_ROLLOUT_ID": f"bench-bundle-{i}"}, limits=SandboxLimits(memory_mb=512),
                          labels={"job": "bench-tasks"}) for i in range(rollouts)]


def p50(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def failures_of(results: list[LaunchResult], verified: bool) -> list[str]:
    bad = []
    for result in results:
        ok = result.verifier is not None and result.verifier.reward == 1.0 if verified else result.status == "completed"
        if not ok:
            why = result.verifier.message if result.verifier is not None else result.infrastructure_error
            bad.append(f"{result.rollout_id}: {result.status} {why or ''} {result.stderr_tail[-200:]}")
    return bad


async def sandboxes(backend: DockerBackend, tags: dict[Path, str], bundle_image: str, args: argparse.Namespace,
                    out: Path) -> tuple[list[LaunchResult], list[LaunchResult]]:
    await run_group(backend, GroupLaunch(launches=task_launches(tags, 1), max_parallel=1), out / "warmup")
    tasks = await run_group(backend, GroupLaunch(launches=task_launches(tags, args.rollouts),
                                                 max_parallel=args.parallel), out / "tasks")
    bundles = await run_group(backend, GroupLaunch(launches=bundle_launches(bundle_image, args.rollouts),
                                                   max_parallel=args.parallel), out / "bundles")
    return tasks, bundles


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=4, help="demo tasks to build and run (default 4)")
    parser.add_argument("--rollouts", type=int, default=8, help="rollouts of each kind (default 8)")
    parser.add_argument("--parallel", type=int, default=4, help="sandboxes at once (default 4)")
    args = parser.parse_args()
    # the launcher's per-rollout info lines (storage_mb not enforced, ...) are not the bench's figures
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    client = docker.from_env(timeout=600, max_pool_size=64)
    for name in (NETWORK, network_names(NETWORK)["none"], network_names(NETWORK)["allowlist"]):
        ensure_rollouts_network(client, name)  # a task's network_mode picks one
    with tempfile.TemporaryDirectory(prefix="veri-bench-tasks-") as tmp:
        work = Path(tmp)
        tasks = fresh_copies(sorted(TASKS.iterdir())[:args.tasks], work / "tasks")
        cold, cached, tags = timed_builds(tasks, work / "vendor", client)
        bundle = work / "bundle"
        bundle.mkdir()
        (bundle / "veri-harness.toml").write_text('name = "bench_one_command"\n'
                                                  'entrypoint = ["bash", "-c", "echo done > /tmp/answer.txt"]\n')
        bundle_image = build_bundle_image(bundle, client, download=False, log=_quiet)
        backend = DockerBackend(network=NETWORK, client=client, launcher_id=f"bench-{uuid.uuid4().hex[:6]}",
                                max_sandboxes=args.parallel, host_paths={})
        try:
            task_results, bundle_results = asyncio.run(sandboxes(backend, tags, bundle_image, args, work / "out"))
        finally:
            backend.close()
        for tag in set(tags.values()):
            client.images.remove(tag, force=True)  # the nonce images are the bench's own
    verifier = [r.verifier.duration_s for r in task_results if r.verifier is not None]
    outside = [r.duration_s - r.verifier.duration_s for r in task_results if r.verifier is not None]
    share = [r.verifier.duration_s / r.duration_s for r in task_results if r.verifier is not None and r.duration_s]
    print(f"task environments ({len(tasks)} demo tasks, FROM mapped to {IMAGE_MAP['python:3.11-slim']}):")
    print(f"  build cold   p50 {p50(cold):6.2f} s   max {max(cold):6.2f} s")
    print(f"  build cached p50 {p50(cached):6.2f} s   max {max(cached):6.2f} s")
    print(f"rollouts ({args.rollouts} of each, {args.parallel} at once, runsc):")
    print(f"  task sandbox, outside the verifier  p50 {p50(outside):6.2f} s")
    print(f"  bundle sandbox, one command         p50 {p50([r.duration_s for r in bundle_results]):6.2f} s")
    print(f"  verifier per rollout                p50 {p50(verifier):6.2f} s   max {max(verifier, default=0):6.2f} s")
    print(f"  verifier's share of the rollout     p50 {p50(share):6.1%}")
    failed = failures_of(task_results, verified=True) + failures_of(bundle_results, verified=False)
    for failure in failed[:10]:
        print("  failed:", failure)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
