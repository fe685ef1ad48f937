"""Sandbox launch benchmark: one gVisor container per rollout, through the launcher's DockerBackend.

A trivial harness whose entrypoint's first act is to write the wall-clock time (bash's $EPOCHREALTIME:
no fork) into VERI_OUTPUT_DIR. Launch-to-entrypoint overhead = that time - the moment the launcher
started that rollout (after any queueing for a parallel slot): create + start the container, runsc
boot, the stdio wrapper, exec. Rollouts/s = completed rollouts / wall time of the group. At 1, 16 and
64 concurrent sandboxes; every rollout must complete.

    python bench/sandbox_launch.py [--levels 1,16,64] [--rollouts N] [--network NAME]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import docker

from veri.core.launch import GroupLaunch, LaunchResult, RolloutLaunch, SandboxLimits
from veri.services.launcher.docker_backend import DockerBackend, ensure_rollouts_network
from veri.services.launcher.group import run_group
from veri.tools.harness.build import build_bundle_image

ENTRYPOINT = ["bash", "-c", 'echo "$EPOCHREALTIME" > "$VERI_OUTPUT_DIR/entered"']


class Timed:
    """The backend, recording when each rollout's run began (after the group's parallel gate)."""

    def __init__(self, inner: DockerBackend) -> None:
        self.inner = inner
        self.name = inner.name
        self.began: dict[str, float] = {}

    async def run(self, launch: RolloutLaunch, output_dir: Path) -> LaunchResult:
        self.began[launch.rollout_id] = time.time()
        return await self.inner.run(launch, output_dir)

    async def remove_leftovers(self) -> int:
        return await self.inner.remove_leftovers()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def level(backend: Timed, image: str, concurrency: int, count: int, out: Path) -> dict:
    tag = uuid.uuid4().hex[:6]
    launches = [RolloutLaunch(rollout_id=f"b{concurrency}-{tag}-{i}", image=image, timeout_s=120,
                              env={"VERI_ROLLOUT_ID": f"b{concurrency}-{i}"},
                              limits=SandboxLimits(memory_mb=256, tmpfs_mb=16), labels={"job": "bench"})
                for i in range(count)]
    started = time.monotonic()
    results = await run_group(backend, GroupLaunch(launches=launches, max_parallel=concurrency), out)
    wall = time.monotonic() - started
    overheads, failures = [], []
    for result in results:
        entered = Path(result.output_dir or "/nonexistent") / "entered"
        if result.status != "completed" or not entered.is_file():
            failures.append(f"{result.rollout_id}: {result.status} {result.infrastructure_error or ''} "
                            f"{result.stderr_tail[-200:]}")
            continue
        overheads.append(float(entered.read_text()) - backend.began[result.rollout_id])
    completed = len(overheads)
    return {"concurrency": concurrency, "rollouts": count, "completed": completed, "failures": failures,
            "wall_s": wall, "per_s": completed / wall,
            "p50": statistics.median(overheads) if overheads else float("nan"),
            "p95": percentile(overheads, 0.95) if overheads else float("nan"),
            "duration_p50": statistics.median(r.duration_s for r in results)}


async def main_async(args: argparse.Namespace) -> int:
    client = docker.from_env(timeout=300, max_pool_size=256)
    network_name = args.network or ensure_rollouts_network(client, "veri-bench-rollouts").name
    with tempfile.TemporaryDirectory(prefix="veri-bench-") as tmp:
        bundle = Path(tmp) / "bundle"
        bundle.mkdir()
        # A JSON array of strings is a TOML array too.
        (bundle / "veri-harness.toml").write_text(f'name = "bench_trivial"\nentrypoint = {json.dumps(ENTRYPOINT)}\n')
        image = build_bundle_image(bundle, client, download=False, log=lambda m: None)
        levels = [int(x) for x in args.levels.split(",")]
        backend = Timed(DockerBackend(network=network_name, client=client, launcher_id=f"bench-{uuid.uuid4().hex[:6]}",
                                      max_sandboxes=max(levels), host_paths={}))
        await level(backend, image, 1, 2, Path(tmp) / "warmup")  # image cache, first-run costs
        rows = []
        for concurrency in levels:
            count = args.rollouts or max(20, 2 * concurrency)
            rows.append(await level(backend, image, concurrency, count, Path(tmp) / f"c{concurrency}"))
        backend.inner.close()
    print(f"sandbox launch (runsc, {image.split(':')[0]}), launch-to-entrypoint overhead and throughput:")
    print(f"{'concurrent':>10} {'rollouts':>8} {'failed':>6} {'p50 s':>7} {'p95 s':>7} {'rollouts/s':>10} "
          f"{'rollout p50 s':>13}")
    for row in rows:
        print(f"{row['concurrency']:>10} {row['rollouts']:>8} {len(row['failures']):>6} {row['p50']:>7.3f} "
              f"{row['p95']:>7.3f} {row['per_s']:>10.2f} {row['duration_p50']:>13.3f}")
    failures = [f for row in rows for f in row["failures"]]
    for failure in failures[:10]:
        print("  failed:", failure)
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="1,16,64", help="concurrent sandboxes, comma-separated")
    parser.add_argument("--rollouts", type=int, default=0, help="rollouts per level (default max(20, 2 x level))")
    parser.add_argument("--network", default=None, help="an existing rollouts network (default: veri-bench-rollouts, "
                                                        "created when missing and kept)")
    return asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
