"""Harness faults at scale: one `veri train` step whose rollouts crash (before and after their model
call), hang past harness_timeout_s (a grandchild in its own session too), fork until `ulimit nproc`
refuses, eat memory past the sandbox's limit, spam stdout (hundreds of MiB that finish; gigabytes the
launcher stops at its log ceiling) or behave, all through the real launcher service (docker backend,
runsc sandboxes, the job's default SandboxLimits), a real capture proxy and hf policy server.

Checked per rollout: the status and rules its fault deserves; healthy ones (ok, fork, spam) scored and
trainable, every other one masked; no span lost (a harness notes each answered call in its output
folder); log tails bounded (the archived harness log); the step's metrics line written and the job
finished. Over the run: no 5xx from the proxy, the launcher's peak RSS, and escapes: a sandbox of the
job left after it, or a forked / re-parented child that outlived its sandbox (it would keep rewriting
an `escaped-*` file in its output folder, see the bundle's main.py).

Full: 64 rollouts (8 tasks x 8). Quick (tests/sandbox/test_harness_faults_step.py): 12 (2 x 6).

Where things run (`faults_stack`), as in the compose stack: sandboxes reach only the rollouts network,
so the capture proxy runs there in a veri/runtime container (its control routes published on
127.0.0.1, behind a control token); the policy server runs on this host, bound to the address of the
proxy's second network only (the trainer hands it weight files by path); the launcher service and
`veri train` run on this host.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml

from bench.reliability.scenarios import failing_row

ROOT = Path(__file__).resolve().parents[3]
NAME = "harness_faults"
BUNDLE = ROOT / "tests" / "sandbox" / "bundles" / "harness_faults"
NETWORK = "veri-test-rollouts"  # kept between runs (see ensure_rollouts_network)
CONTROL_NETWORK = "veri-test-reliability-control"  # the proxy container's way to the policy on this host
RUNTIME_IMAGE = "veri/runtime"
HARNESS_TIMEOUT_S = 60.0
LOG_BOUND_BYTES = 2 * 64 * 1024 + 4096  # both tails (SandboxLimits.log_tail_bytes each) and the status lines

QUICK_MIX = [
    ["ok", "crash", "hang", "fork", "memhog", "spam"],
    ["ok", "crash_early", "spam", "ok", "fork", "ok"],
]
FULL_MIX = [  # 64 rollouts: 27 ok, 10 spam (2 without end), 8 fork, 7 hang, 8 crash (4 early), 4 memhog
    ["ok", "crash", "hang", "fork", "memhog", "spam", "ok", "ok"],
    ["ok", "crash_early", "spam", "ok", "fork", "hang", "ok", "spam_huge"],
    ["ok", "ok", "crash", "fork", "spam", "ok", "hang", "ok"],
    ["spam", "ok", "fork", "crash_early", "ok", "memhog", "ok", "ok"],
    ["ok", "hang", "ok", "spam", "fork", "ok", "crash", "spam"],
    ["fork", "ok", "memhog", "ok", "hang", "spam_huge", "ok", "crash_early"],
    ["ok", "spam", "ok", "fork", "ok", "crash", "hang", "ok"],
    ["memhog", "ok", "fork", "ok", "spam", "ok", "crash_early", "hang"],
]

# fault -> (status, the rules that must fire; each of these is masked unless marked trainable)
EXPECTED: dict[str, tuple[str, set[str]]] = {
    "ok": ("completed", set()),
    "fork": ("completed", set()),
    "spam": ("completed", set()),
    "crash": ("failed", {"harness_failed"}),
    "crash_early": ("failed", {"harness_failed", "no_spans"}),
    "hang": ("truncated", {"harness_timeout"}),
    "memhog": ("failed", {"harness_failed"}),
    "spam_huge": ("failed", {"harness_failed"}),
}
# what the rollout's archived harness log must say (its tails and veri's notes)
EVIDENCE: dict[str, Callable[[str], bool]] = {
    "crash": lambda log: "RuntimeError: harness bug after its model call" in log,
    "crash_early": lambda log: "crashing before any model call" in log,
    "hang": lambda log: "hanging" in log and f"timeout_s={HARNESS_TIMEOUT_S:g}" in log,
    "fork": lambda log: "fork refused after" in log,
    "memhog": lambda log: "not killed" not in log and ("MemoryError" in log or "memory limit" in log),
    "spam": lambda log: "LAST LINE" in log and "earlier bytes dropped" in log,
    "spam_huge": lambda log: "stdout + stderr passed" in log,
}

REWARD = '''
def reward(outputs, **kwargs):
    answer = (outputs[0] / "answer.txt").read_text()
    return [min(len(answer), 40) / 40]
'''


@dataclass
class StepReport:
    rollouts: int = 0
    by_fault: dict[str, int] = field(default_factory=dict)
    trainable: int = 0
    spans_lost: int = 0
    server_errors: int = 0
    escapes: int = 0
    launcher_peak_rss_mb: float = 0.0
    largest_log_bytes: int = 0
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    def notes(self) -> str:
        mix = ", ".join(f"{n} {fault}" for fault, n in sorted(self.by_fault.items(), key=lambda kv: -kv[1]))
        return (f"1 step ({mix}): statuses as expected, {self.trainable} trained; launcher peak RSS "
                f"{self.launcher_peak_rss_mb:.0f} MB, largest harness log {self.largest_log_bytes >> 10} KiB; "
                f"{self.seconds:.0f} s")


def mix_for(quick: bool) -> list[list[str]]:
    return QUICK_MIX if quick else FULL_MIX


def write_job(folder: Path, model: Path, mix: list[list[str]], *, spam_mib: int, max_parallel: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"prompt": f"Say something about task {i}.", "faults": faults, "spam_mib": spam_mib}
            for i, faults in enumerate(mix)]
    (folder / "tasks.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (folder / "reward.py").write_text(REWARD)
    rollouts = sum(len(faults) for faults in mix)
    config = {
        "model": str(model), "backend": "hf", "dataset": {"path": "tasks.jsonl"}, "harness_bundle": str(BUNDLE),
        "rewards": [{"file": "reward.py"}], "rollouts_per_prompt": len(mix[0]), "max_response_length": 64,
        "sampling": {"max_tokens": 16}, "learning_rate": 1e-4, "max_steps": 1,
        "harness_timeout_s": HARNESS_TIMEOUT_S, "max_parallel_rollouts": max_parallel,
        "grpo": {"per_device_train_batch_size": rollouts},
    }
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def build_image(docker_client: Any, vendor_root: Path) -> str:
    from veri.tools.harness.build import build_bundle_image

    return build_bundle_image(BUNDLE, docker_client, vendor_root=vendor_root, download=False)


class RssWatch:
    """Peak resident memory of a process and its children, sampled every 0.2 s."""

    def __init__(self, pid: int) -> None:
        self.peak = 0
        self._process = psutil.Process(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            try:
                processes = [self._process, *self._process.children(recursive=True)]
                self.peak = max(self.peak, sum(p.memory_info().rss for p in processes))
            except psutil.Error:
                continue

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak / (1 << 20)


@dataclass
class FaultsStack:
    policy_url: str
    proxy_url: str  # its control routes, from this host
    launcher_url: str
    launcher_pid: int
    output_root: Path
    token: str
    proxy_container: Any


@contextlib.contextmanager
def faults_stack(docker_client: Any, model: Path, workdir: Path) -> Iterator[FaultsStack]:
    from testkit.servers import start_server, stop_server
    from veri.services.launcher.docker_backend import ensure_rollouts_network

    ensure_rollouts_network(docker_client, NETWORK)
    control = _control_network(docker_client)
    gateway = control.attrs["IPAM"]["Config"][0]["Gateway"]
    token = secrets.token_hex(16)
    policy = _policy_on(gateway, model, token)
    proxy = None
    try:
        name = f"veri-rel-proxy-{uuid.uuid4().hex[:6]}"
        proxy = docker_client.containers.run(
            RUNTIME_IMAGE, ["veri", "serve", "proxy", "--policy-url", policy.url, "--model", "/models/policy",
                            "--host", "0.0.0.0", "--port", "8000", "--store", "/tmp/spans",
                            "--public-url", f"http://{name}:8000", "--max-tokens", "16"],
            name=name, detach=True, network=control.name, ports={"8000/tcp": ("127.0.0.1", None)},
            environment={"VERI_CONTROL_TOKEN": token}, labels={"org.veri.test": "1"},
            volumes={str(model.resolve()): {"bind": "/models/policy", "mode": "ro"}},
        )
        docker_client.networks.get(NETWORK).connect(proxy)
        proxy.reload()
        port = proxy.attrs["NetworkSettings"]["Ports"]["8000/tcp"][0]["HostPort"]
        proxy_url = f"http://127.0.0.1:{port}"
        _wait_healthy(proxy_url, proxy)
        with start_server(["serve", "launcher", "--network", NETWORK, "--launcher-id", f"rel-{uuid.uuid4().hex[:6]}",
                           "--output-root", str(workdir / "outputs")], env={"VERI_CONTROL_TOKEN": token}) as launcher:
            yield FaultsStack(policy_url=policy.url, proxy_url=proxy_url, launcher_url=launcher.url,
                              launcher_pid=launcher.process.pid, output_root=workdir / "outputs", token=token,
                              proxy_container=proxy)
    finally:
        if proxy is not None:
            proxy.remove(force=True)
        stop_server(policy)


def _control_network(docker_client: Any) -> Any:
    """A plain bridge (kept between runs, like the rollouts network): the proxy reaches the host's policy."""
    try:
        return docker_client.networks.get(CONTROL_NETWORK)
    except Exception:  # noqa: BLE001 - docker.errors.NotFound; created below
        return docker_client.networks.create(CONTROL_NETWORK, driver="bridge", check_duplicate=True)


def _policy_on(host: str, model: Path, token: str) -> Any:
    """`veri serve policy` bound to `host` (testkit.servers binds loopback, which a container cannot reach)."""
    from testkit.servers import RunningServer, free_port

    port = free_port()
    log_path = Path(os.environ.get("VERI_TEST_LOGS", "/tmp/veri-test-logs")) / f"policy-reliability-{port}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        process = subprocess.Popen([sys.executable, "-m", "veri.cli", "serve", "policy", "--model", str(model),
                                    "--threads", "1", "--host", host, "--port", str(port)],
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                   env={**os.environ, "VERI_CONTROL_TOKEN": token})  # a non-loopback bind needs one
    server = RunningServer(url=f"http://{host}:{port}", port=port, process=process, log_path=log_path)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the policy server exited {process.returncode}: {server.log()[-2000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{server.url}/health", timeout=2).status_code == 200:
                return server
        time.sleep(0.5)
    raise RuntimeError(f"the policy server did not start: {server.log()[-2000:]}")


def _wait_healthy(url: str, container: Any) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        container.reload()
        if container.status == "exited":
            break
        time.sleep(0.5)
    raise RuntimeError(f"the proxy container did not start: {container.logs().decode(errors='replace')[-2000:]}")


def run_step(*, docker_client: Any, model: Path, stack: FaultsStack, image: str, workdir: Path, quick: bool,
             spam_mib: int | None = None) -> StepReport:
    """One `veri train` step over the mix, through the stack's launcher; the checked report."""
    mix = mix_for(quick)
    job_name = f"harness-faults-{uuid.uuid4().hex[:6]}"
    job = write_job(workdir, model, mix, spam_mib=spam_mib or (128 if quick else 512),
                    max_parallel=12 if quick else 16)
    command = [sys.executable, "-m", "veri.cli", "train", str(job), "--base-dir", str(workdir), "--name", job_name,
               "--output", str(workdir / "jobs"), "--proxy-url", stack.proxy_url, "--policy-url", stack.policy_url,
               "--sandbox", "launcher", "--launcher-url", stack.launcher_url, "--image", image,
               "--control-token", stack.token]
    report = StepReport()
    watch = RssWatch(stack.launcher_pid)
    started = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, timeout=1800, cwd=ROOT)
    report.seconds = time.monotonic() - started
    report.launcher_peak_rss_mb = watch.stop()
    if result.returncode != 0:
        report.problems.append(f"veri train exited {result.returncode}: {result.stderr.strip()[-2000:]}")
        return report
    _check_archive(report, workdir / "jobs" / job_name, stack.output_root / job_name)
    report.escapes = _escapes(docker_client, job_name, stack.output_root / job_name)
    report.server_errors = proxy_5xx(stack.proxy_url, stack.token)
    if report.launcher_peak_rss_mb > 1024:
        report.problems.append(f"the launcher's RSS peaked at {report.launcher_peak_rss_mb:.0f} MB")
    return report


def _check_archive(report: StepReport, job_dir: Path, outputs: Path) -> None:
    from veri.archive import ArchiveIndex, read_metrics

    with ArchiveIndex(job_dir) as index:
        paths = [index.layout.inside(row["path"]) for row in index.rollouts(limit=100_000)]
        records = [(index.read_rollout(path), path) for path in paths]
    for record, path in records:
        fault = record.task["faults"][record.rollout_index]
        report.rollouts += 1
        report.by_fault[fault] = report.by_fault.get(fault, 0) + 1
        report.trainable += record.trainable
        where = f"rollout {record.rollout_index} of task {record.task_index} ({fault})"
        status, rules = EXPECTED[fault]
        fired = {verdict.rule.value for verdict in record.verdicts}
        if record.status != status or not rules <= fired:
            report.problems.append(f"{where}: {record.status} with {sorted(fired)}, "
                                   f"expected {status} with {sorted(rules)}")
        healthy = not rules
        if healthy and (not record.trainable or record.reward is None or record.reward.reward is None):
            report.problems.append(f"{where}: healthy but not scored and trainable: {sorted(fired)}")
        if not healthy and (record.trainable or record.reward is not None):
            report.problems.append(f"{where}: a faulty rollout was scored ({record.reward})")
        log = path.with_suffix(".log")
        text = log.read_text(errors="replace") if log.is_file() else ""
        report.largest_log_bytes = max(report.largest_log_bytes, len(text.encode()))
        if len(text.encode()) > LOG_BOUND_BYTES:
            report.problems.append(f"{where}: its harness log holds {len(text.encode())} bytes")
        if fault in EVIDENCE and not EVIDENCE[fault](text):
            first_line, _, rest = text.partition("\n")
            stderr = rest.rpartition("--- stderr (tail) ---")[2]
            report.problems.append(f"{where}: its log does not show the fault: {first_line}; stderr {stderr[-300:]!r}")
        if (outputs / record.rollout_id / "calls").is_file() and not record.spans:
            report.spans_lost += 1
            report.problems.append(f"{where}: the harness got an answer but the record has no span")
    metrics = read_metrics(job_dir / "metrics.jsonl")
    expected = sum(len(faults) for faults in mix_for(report.rollouts <= 16))
    if report.rollouts != expected:
        report.problems.append(f"{report.rollouts} rollouts archived, expected {expected}")
    if [line["step"] for line in metrics] != [0] or metrics[0].get("trainable") != report.trainable:
        report.problems.append(f"step metrics: {[(m['step'], m.get('trainable')) for m in metrics]}")
    elif not isinstance(metrics[0].get("train/loss"), float):
        report.problems.append(f"step 0 has no training loss: {metrics[0].get('train/loss')!r}")


def _escapes(docker_client: Any, job_name: str, outputs: Path) -> int:
    """Sandboxes of the job still there, plus children that outlived their sandbox (see main.py)."""
    left = docker_client.containers.list(all=True, filters={"label": f"veri.job={job_name}"})
    time.sleep(6)  # every child ever started is past its first 5 s
    for marker in outputs.glob("*/escaped-*"):
        marker.unlink()
    time.sleep(3)  # a surviving child rewrites its marker every second
    return len(left) + len(list(outputs.glob("*/escaped-*")))


def proxy_5xx(proxy_url: str, token: str, *, besides: tuple[str, ...] = ()) -> int:
    """5xx the proxy answered since its start (its /metrics), not counting the statuses in `besides`."""
    reply = httpx.get(f"{proxy_url}/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    reply.raise_for_status()
    total = 0
    for line in reply.text.splitlines():
        if (line.startswith("veri_proxy_requests_total{") and 'status="5' in line
                and not any(f'status="{status}"' in line for status in besides)):
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def sandbox_preflight(row: dict[str, Any]) -> tuple[Any, dict[str, Any] | None]:
    """(a Docker client, None) when the tiny model, dockerd + runsc and the images are there; else
    (None, the row failed with a note that says what to run)."""
    import docker

    if not (ROOT / "build" / "models" / "tiny" / "config.json").is_file():
        return None, {**row, "notes": "no tiny model: run `make tiny-model`"}
    try:
        client = docker.from_env(timeout=120)
        if "runsc" not in client.info().get("Runtimes", {}):
            return None, {**row, "notes": "dockerd has no runsc runtime: run `make docker`"}
        client.images.get("veri/base")
        client.images.get(RUNTIME_IMAGE)
    except Exception as error:  # noqa: BLE001 - no daemon / no image: the row says what to run
        return None, {**row, "notes": f"no sandbox ({type(error).__name__}: {error}): run `make docker images`"}
    return client, None


def run(quick: bool) -> dict[str, Any]:
    row = failing_row(NAME)
    model = ROOT / "build" / "models" / "tiny"
    client, refused = sandbox_preflight(row)
    if refused is not None:
        return refused
    with tempfile.TemporaryDirectory(prefix="veri-harness-faults-") as tmp:
        folder = Path(tmp)
        image = build_image(client, folder / "vendor")
        with faults_stack(client, model, folder) as stack:
            report = run_step(docker_client=client, model=model, stack=stack, image=image, workdir=folder / "job",
                              quick=quick)
    client.close()
    row.update(runs=report.rollouts, spans_lost=report.spans_lost, escapes=report.escapes)
    row["5xx"] = report.server_errors
    if report.problems or report.server_errors or report.escapes:
        return {**row, "notes": f"{len(report.problems)} problems, first: {(report.problems or ['-'])[0][:400]}"}
    return {**row, "outcome": "pass", "notes": report.notes()}
