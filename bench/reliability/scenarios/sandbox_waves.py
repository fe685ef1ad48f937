"""Sandboxes under load (docs/reliability.md, "The scenarios"): rollouts in waves through the real launcher service
(`veri serve launcher`, docker backend, runsc sandboxes, the default SandboxLimits), each wave one group
of `wave` launches all allowed at once (`max_parallel` = wave), as `veri train` sends a step's rollouts.

Each sandbox runs a one-line harness that writes the time it started into its output folder: a launch
is the time from the wave's request to that line running (image, container create, gVisor start, the
entrypoint), read on the host's clock, which gVisor shares. Pass: every rollout `completed` with its
start time collected (0 launch failures), no sandbox of the run left afterwards. Reported: the slowest
launch and p50 / p95, and the launcher's peak RSS.

Full: 256 rollouts in waves of 64. Quick: 2 waves of 8. `tests/sandbox/test_sandbox_waves.py`: 1 of 8.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:  # run by bench/reliability/run.py, not from the repo root
    sys.path.insert(0, str(ROOT))

from bench.reliability.scenarios import failing_row  # noqa: E402
from bench.reliability.scenarios.harness_faults import NETWORK, RssWatch  # noqa: E402

NAME = "sandbox_waves"
TIMEOUT_S = 300.0  # per sandbox: far above a launch on a loaded box, so a slow launch is measured, not killed
MANIFEST = 'name = "sandbox_waves"\nentrypoint = ["sh", "-c", "date +%s.%N > \\"$VERI_OUTPUT_DIR/started\\""]\n'


@dataclass
class WavesReport:
    launches_s: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    leftovers: int = 0
    launcher_peak_rss_mb: float = 0.0
    seconds: float = 0.0

    def percentile(self, q: float) -> float:
        ordered = sorted(self.launches_s)
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")

    def notes(self, waves: int, wave: int) -> str:
        return (f"{waves} waves of {wave}: launch p50 {self.percentile(0.5):.1f} s, p95 {self.percentile(0.95):.1f} s,"
                f" slowest {max(self.launches_s, default=float('nan')):.1f} s; launcher peak RSS"
                f" {self.launcher_peak_rss_mb:.0f} MB; {self.seconds:.0f} s")


def build_image(docker_client: Any, folder: Path) -> str:
    from veri.tools.harness.build import build_bundle_image

    bundle = folder / "sandbox_waves"
    bundle.mkdir(parents=True)
    (bundle / "veri-harness.toml").write_text(MANIFEST)
    return build_bundle_image(bundle, docker_client, vendor_root=folder / "vendor", download=False)


def run_waves(launcher_url: str, image: str, output_root: Path, *, waves: int, wave: int) -> WavesReport:
    """`waves` groups of `wave` launches, one after the other; each result checked."""
    from veri.core.launch import GroupLaunch, RolloutLaunch
    from veri.services.launcher.client import LauncherClient

    report = WavesReport()
    subdir = f"waves-{uuid.uuid4().hex[:6]}"
    client = LauncherClient(launcher_url, subdir=subdir)
    for index in range(waves):
        ids = [f"wave{index}-{n}-{uuid.uuid4().hex[:6]}" for n in range(wave)]
        group = GroupLaunch(max_parallel=wave, launches=[
            RolloutLaunch(rollout_id=rid, image=image, timeout_s=TIMEOUT_S, env={"VERI_ROLLOUT_ID": rid},
                          labels={"veri.job": subdir}) for rid in ids])
        sent = time.time()
        results = asyncio.run(client.run_group(group))
        for result in results:
            started = output_root / subdir / result.rollout_id / "started"
            if result.status != "completed" or not started.is_file():
                report.failures.append(f"{result.rollout_id}: {result.status} {result.infrastructure_error or ''}"
                                       f" exit {result.exit_code}, stderr {result.stderr_tail[-300:]!r}")
                continue
            report.launches_s.append(float(started.read_text()) - sent)
    return report


def leftovers(docker_client: Any, launcher_id: str) -> int:
    return len(docker_client.containers.list(all=True, filters={"label": f"veri.launcher={launcher_id}"}))


def check(docker_client: Any, *, waves: int, wave: int) -> WavesReport:
    """A launcher service of its own, the image built, the waves run: the report."""
    from testkit.servers import start_server
    from veri.services.launcher.docker_backend import ensure_rollouts_network

    ensure_rollouts_network(docker_client, NETWORK)
    launcher_id = f"waves-{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryDirectory(prefix="veri-sandbox-waves-") as tmp:
        folder = Path(tmp)
        image = build_image(docker_client, folder)
        try:
            with start_server(["serve", "launcher", "--network", NETWORK, "--launcher-id", launcher_id,
                               "--output-root", str(folder / "outputs"), "--max-parallel", str(wave)],
                              env={"VERI_CONTROL_TOKEN": ""}) as launcher:
                watch = RssWatch(launcher.process.pid)
                started = time.monotonic()
                report = run_waves(launcher.url, image, folder / "outputs", waves=waves, wave=wave)
                report.seconds = time.monotonic() - started
                report.launcher_peak_rss_mb = watch.stop()
                report.leftovers = leftovers(docker_client, launcher_id)
        finally:
            docker_client.images.remove(image, force=True)
    return report


def run(quick: bool) -> dict[str, Any]:
    import docker

    waves, wave = (2, 8) if quick else (4, 64)
    row = failing_row(NAME)
    try:
        client = docker.from_env(timeout=120)
        if "runsc" not in client.info().get("Runtimes", {}):
            return {**row, "notes": "dockerd has no runsc runtime: run `make docker`"}
        client.images.get("veri/base")
    except Exception as error:  # noqa: BLE001 - no daemon / no image: the row says what to run
        return {**row, "notes": f"no sandbox ({type(error).__name__}: {error}): run `make docker images`"}
    report = check(client, waves=waves, wave=wave)
    client.close()
    row.update(runs=len(report.launches_s) + len(report.failures), escapes=report.leftovers)
    problems = report.failures + ([f"{report.leftovers} sandboxes left after the run"] if report.leftovers else [])
    if problems:
        return {**row, "notes": f"{len(report.failures)} launch failures; first: {problems[0][:300]};"
                                f" the others: {report.notes(waves, wave)}"}
    return {**row, "outcome": "pass", "notes": report.notes(waves, wave)}


if __name__ == "__main__":
    import orjson

    print(orjson.dumps(run(quick="--quick" in sys.argv), option=orjson.OPT_INDENT_2).decode())
