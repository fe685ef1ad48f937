"""Service faults: kill -9 each of veri's services in the middle of a `veri train` step, then fill the
state volume, and check that the job survives what it can and stops cleanly where it cannot.

One job, one fault per step (the services as in the compose stack, restarted as its `restart:` policy
does; see `service_stack`):
  step 0  the proxy's process is killed while its harnesses call; docker's restart policy brings the
          container back (its span store is a host folder). Each harness retries like an SDK, for 90 s:
          one that gives up first ends harness_failed, masked; every call a harness got an answer for
          has its span (spans_lost).
  step 1  the launcher is killed while its sandboxes run, and started again (it removes the sandboxes
          its dead self left). The group's rollouts end `failed` with an `infrastructure_error`,
          masked (never scored as a wrong answer); the job goes on. The console (`veri serve console`:
          gunicorn and its worker, one process group) is killed too and started again: it shows the
          job running, and at the end finished with every step and every archived rollout.
  step 2  the policy server is killed mid-call and started again (version 0: the model folder). The
          proxy answers the call in flight with a 5xx the harness retries; the trainer pushes its
          weights to the restarted server at the step's end and goes on.
  step 3  dockerd is stopped (SIGTERM) for ~8 s while the step's sandboxes run, and started again by
          scripts/docker/setup.sh (dockerd_outage.py: with live-restore the containers keep running;
          a probe sandbox checks the proxy answers sandboxes meanwhile and that an exit while dockerd
          is down is read once it is back). The launcher's docker calls retry, its waits reconnect;
          the step's rollouts complete and are trained.
  step 4  the trainer is killed mid-step (its whole process group, as its container would die), then
          run again with --resume (`make train RESUME=1`): it resumes from checkpoint 4, and the
          archive holds each (step, task, rollout) once, every record whole JSON.
Then `disk_full_job`: a job whose archive is on a tmpfs of a few MB that a filler fills mid-run: the
trainer stops with a message naming the folder and the fix, job.json says failed with it, and no
archived file is half-written.

Full: 4 rollouts per step (2 tasks x 2), 3 calls each. Quick (tests/sandbox/test_service_faults.py):
2 rollouts per step (1 task x 2), 2 calls each. Needs docker with runsc and live-restore, veri/runtime and
veri/base (`make docker images`), root for the tmpfs mount and for stopping dockerd.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
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
NAME = "service_faults"
BUNDLE = ROOT / "tests" / "sandbox" / "bundles" / "service_faults"
NETWORK = "veri-test-rollouts"  # shared with harness_faults, kept between runs
CONTROL_NETWORK = "veri-test-reliability-control"
RUNTIME_IMAGE = "veri/runtime"
# Not tests/sandbox's org.veri.test: a test session that ends sweeps those away, mid-run on a shared box.
TEST_LABEL = "org.veri.test.service-faults"
FAULTS = ["proxy", "launcher", "policy", "dockerd", "trainer"]  # step k: FAULTS[k]; one clean step after them
CONSOLE_STEP = 1  # the console is killed in the launcher's step too: it reads the job's folder, nothing else
REWARD = '''
def reward(outputs, **kwargs):
    answer = (outputs[0] / "answer.txt").read_text()
    return [min(len(answer), 40) / 40]
'''


@dataclass
class FaultReport:
    rollouts: int = 0
    spans_lost: int = 0
    server_errors: int = 0
    escapes: int = 0
    masked_infra: int = 0
    gave_up: int = 0  # harnesses that stopped retrying while the proxy restarted (masked harness_failed)
    late_spans: int = 0  # of masked rollouts: answered after the trainer read them (in the store, not the record)
    # served by the restarted policy server before it got the weights again (policy_server_restarted; on hf its
    # spans carry version 0 too: policy_version_stale)
    stale_masked: int = 0
    restarts: dict[str, float] = field(default_factory=dict)  # service -> seconds until healthy again
    outage: Any = None  # dockerd_outage.Outage of the dockerd step
    dockerd_step: dict[str, int] = field(default_factory=dict)  # that step's rollouts by status
    launcher_away_s: list[float] = field(default_factory=list)  # the launcher's "dockerd answering again" lines
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)


# --- the services -------------------------------------------------------------------------------------

class HostService:
    """`veri serve ...` on this host at a fixed address, so it can be killed and started again there."""

    def __init__(self, name: str, args: list[str], host: str, port: int, logs: Path,
                 env: dict[str, str] | None = None) -> None:
        self.name, self.args, self.host, self.port = name, args, host, port
        self.url = f"http://{host}:{port}"
        self.log_path = logs / f"{name}.log"
        self.env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        started = time.monotonic()
        with open(self.log_path, "a") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "veri.cli", "serve", *self.args, "--host", self.host, "--port", str(self.port)],
                stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited {self.process.returncode}: {self.log_path.read_text()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return time.monotonic() - started
            time.sleep(0.3)
        raise RuntimeError(f"{self.name} did not start: {self.log_path.read_text()[-2000:]}")

    def kill9(self) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill9()


@dataclass
class ServiceStack:
    policy: HostService
    launcher: HostService
    console: HostService  # `veri serve console` (gunicorn, one worker) over the workdir's jobs/
    proxy: Any  # the container
    proxy_url: str  # on the control network, as the trainer's container reaches `proxy:8000`
    proxy_name: str  # its name on the rollouts network, as sandboxes call it
    published_url: str  # its port published on 127.0.0.1, as compose.yaml publishes it
    spans_dir: Path
    output_root: Path
    token: str
    launcher_id: str

    def kill_proxy(self) -> float:
        """kill -9 the proxy's process (tini's child): the container exits 137 and its restart policy
        starts it again. Seconds until it answers /health."""
        self.proxy.reload()
        tini = psutil.Process(self.proxy.attrs["State"]["Pid"])
        [server] = [child for child in tini.children() if "veri" in " ".join(child.cmdline())]
        started = time.monotonic()
        server.kill()
        server.wait(timeout=30)  # gone (else /health could still be its answer)
        _wait_restarted(self.proxy, self.proxy_url)
        return time.monotonic() - started


@contextlib.contextmanager
def service_stack(docker_client: Any, model: Path, workdir: Path) -> Iterator[ServiceStack]:
    """policy and launcher on this host; the proxy in a veri/runtime container on the rollouts network
    (as harness_faults: sandboxes reach only that network) with `restart: on-failure`, as compose.yaml."""
    from bench.reliability.scenarios.harness_faults import _control_network
    from testkit.servers import free_port
    from veri.services.launcher.docker_backend import ensure_rollouts_network

    ensure_rollouts_network(docker_client, NETWORK)
    control = _control_network(docker_client)
    gateway = control.attrs["IPAM"]["Config"][0]["Gateway"]
    token = secrets.token_hex(16)
    logs = workdir / "logs"
    spans = workdir / "spans"
    for folder in (logs, spans, workdir / "outputs"):
        folder.mkdir(parents=True, exist_ok=True)
    spans.chmod(0o777)
    launcher_id = f"faults-{uuid.uuid4().hex[:6]}"
    policy = HostService("policy", ["policy", "--model", str(model), "--threads", "1"], gateway, free_port(), logs,
                         env={"VERI_CONTROL_TOKEN": token})  # bound off loopback: a token (core/auth.py)
    launcher = HostService("launcher", ["launcher", "--network", NETWORK, "--launcher-id", launcher_id,
                                        "--output-root", str(workdir / "outputs")],
                           "127.0.0.1", free_port(), logs, env={"VERI_CONTROL_TOKEN": token})
    console = HostService("console", ["console", "--state", str(workdir)], "127.0.0.1", free_port(), logs)
    (workdir / "jobs").mkdir(exist_ok=True)
    proxy = None
    try:
        policy.start()
        launcher.start()
        console.start()
        name = f"veri-rel-faults-proxy-{uuid.uuid4().hex[:6]}"
        published = free_port()
        proxy = docker_client.containers.run(
            RUNTIME_IMAGE, ["veri", "serve", "proxy", "--policy-url", policy.url, "--model", "/models/policy",
                            "--host", "0.0.0.0", "--port", "8000", "--store", "/state/spans",
                            "--public-url", f"http://{name}:8000", "--max-tokens", "16"],
            name=name, detach=True, network=control.name, restart_policy={"Name": "on-failure"},
            environment={"VERI_CONTROL_TOKEN": token}, labels={TEST_LABEL: "1"},
            ports={"8000/tcp": ("127.0.0.1", published)},
            volumes={str(model.resolve()): {"bind": "/models/policy", "mode": "ro"},
                     str(spans): {"bind": "/state/spans", "mode": "rw"}},
        )
        docker_client.networks.get(NETWORK).connect(proxy)
        proxy.reload()
        address = proxy.attrs["NetworkSettings"]["Networks"][control.name]["IPAddress"]
        proxy_url = f"http://{address}:8000"
        _wait_restarted(proxy, proxy_url)
        yield ServiceStack(policy=policy, launcher=launcher, console=console, proxy=proxy, proxy_url=proxy_url,
                           proxy_name=name,
                           published_url=f"http://127.0.0.1:{published}", spans_dir=spans,
                           output_root=workdir / "outputs", token=token, launcher_id=launcher_id)
    finally:
        if proxy is not None:
            with contextlib.suppress(Exception):
                (logs / "proxy.log").write_bytes(proxy.logs())
            proxy.remove(force=True)
        console.stop()
        launcher.stop()
        policy.stop()
        for container in docker_client.containers.list(all=True, filters={"label": f"veri.launcher={launcher_id}"}):
            container.remove(force=True)


def _wait_restarted(container: Any, url: str) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        time.sleep(0.3)
    container.reload()
    raise RuntimeError(f"the proxy container is {container.status}, not healthy:"
                       f" {container.logs().decode(errors='replace')[-2000:]}")


# --- the job ------------------------------------------------------------------------------------------

def write_job(folder: Path, model: Path, *, tasks: int, calls: int, max_steps: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"prompt": f"Say something about task {i}.", "calls": calls, "pause_s": 1.5} for i in range(tasks)]
    (folder / "tasks.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (folder / "reward.py").write_text(REWARD)
    config = {
        "model": str(model), "backend": "hf", "dataset": {"path": "tasks.jsonl"}, "harness_bundle": str(BUNDLE),
        "rewards": [{"file": "reward.py"}], "rollouts_per_prompt": 2, "max_response_length": 256,
        "sampling": {"max_tokens": 16}, "learning_rate": 1e-4, "max_steps": max_steps,
        "harness_timeout_s": 240, "max_parallel_rollouts": 2 * tasks,
        "grpo": {"per_device_train_batch_size": 2 * tasks, "save_steps": 1, "logging_steps": 1, "seed": 0},
    }
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def build_image(docker_client: Any, vendor_root: Path) -> str:
    from veri.tools.harness.build import build_bundle_image

    return build_bundle_image(BUNDLE, docker_client, vendor_root=vendor_root, download=False)


def remove_image(docker_client: Any, image: str) -> None:
    """The bundle's test image (veri/harness-service_faults:<hash>, a name no one else uses)."""
    with contextlib.suppress(Exception):  # docker.errors.APIError: in use or gone; nothing else to do
        docker_client.images.remove(image, force=True)


class Trainer:
    """`veri train` as a process group (what dies with its container), against the stack."""

    def __init__(self, stack: ServiceStack, job: Path, image: str, jobs: Path, name: str, logs: Path) -> None:
        self.command = [sys.executable, "-m", "veri.cli", "train", str(job), "--base-dir", str(job.parent),
                        "--name", name, "--output", str(jobs), "--proxy-url", stack.proxy_url,
                        "--policy-url", stack.policy.url, "--sandbox", "launcher",
                        "--launcher-url", stack.launcher.url, "--image", image, "--control-token", stack.token]
        self.log_path = logs / f"trainer-{name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, *, resume: bool = False) -> None:
        with open(self.log_path, "a") as log:
            self.process = subprocess.Popen([*self.command, *(["--resume"] if resume else [])], cwd=ROOT,
                                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill9(self) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def wait(self, timeout: float) -> int:
        assert self.process is not None
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            return -9

    def tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]


def wait_mid_step(docker_client: Any, trainer: Trainer, job_name: str, outputs: Path, step: int,
                  timeout: float = 600) -> None:
    """Until a sandbox of `step` has had one call answered (the step is under way, its spans in flight)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not trainer.running():
            raise RuntimeError(f"the trainer exited before step {step}: {trainer.tail()}")
        containers = docker_client.containers.list(filters={"label": [f"veri.job={job_name}", f"veri.step={step}"]})
        if any((outputs / job_name / c.labels["veri.rollout_id"] / "calls").is_file() for c in containers):
            return
        time.sleep(0.2)
    raise RuntimeError(f"step {step} never got under way: {trainer.tail()}")


def run_faults(*, docker_client: Any, stack: ServiceStack, model: Path, image: str, workdir: Path,
               quick: bool, stop_dockerd: bool = True) -> FaultReport:
    """The job with a fault per step; `stop_dockerd=False` leaves the dockerd step's daemon alone
    (no root, no live-restore: dockerd_outage.unstoppable)."""
    report = FaultReport()
    tasks = 1 if quick else 2
    job_name = f"service-faults-{uuid.uuid4().hex[:6]}"
    job = write_job(workdir / "job", model, tasks=tasks, calls=2 if quick else 3, max_steps=len(FAULTS) + 1)
    jobs = workdir / "jobs"
    trainer = Trainer(stack, job, image, jobs, job_name, workdir / "logs")
    started = time.monotonic()
    trainer.start()
    kills: dict[str, Callable[[], float]] = {
        "proxy": stack.kill_proxy,
        "launcher": lambda: _kill_and_start(stack.launcher, pause_s=2.0),
        "policy": lambda: _kill_and_start(stack.policy, pause_s=1.0),
        "dockerd": lambda: _stop_dockerd(report, docker_client, stack, image, workdir),
    }
    try:
        for step, service in enumerate(FAULTS):
            wait_mid_step(docker_client, trainer, job_name, stack.output_root, step)
            if service == "trainer":
                trainer.kill9()
                time.sleep(2)
                trainer.start(resume=True)
            elif service == "dockerd" and not stop_dockerd:
                continue
            else:
                report.restarts[service] = kills[service]()
            if step == CONSOLE_STEP:
                report.restarts["console"] = _kill_and_start(stack.console, pause_s=1.0)
                check_console(report, stack.console, job_name, running=True)
        status = trainer.wait(timeout=900)
    except RuntimeError as error:
        report.problems.append(str(error))
        return report
    finally:
        if trainer.running():
            trainer.kill9()
    report.seconds = time.monotonic() - started
    if stop_dockerd:
        # its waits on the step's sandboxes were cut: it must have retried until dockerd answered again
        lines = stack.launcher.log_path.read_text().splitlines()
        found = [re.search(r"away_s\W+([\d.]+)", line) for line in lines if "dockerd.answering_again" in line]
        report.launcher_away_s = [float(match[1]) for match in found if match]
        if not found:
            report.problems.append("the launcher never logged dockerd.answering_again: did dockerd stop mid-step?")
    if status != 0:
        report.problems.append(f"veri train exited {status}: {trainer.tail()}")
        return report
    from veri.services.proxy.control_client import ControlClient

    control = ControlClient(stack.proxy_url, token=stack.token)
    check_archive(report, jobs / job_name, stack.output_root / job_name, control, per_step=2 * tasks)
    check_console(report, stack.console, job_name, running=False, rollouts=report.rollouts)
    left = docker_client.containers.list(all=True, filters={"label": f"veri.job={job_name}"})
    report.escapes = len(left)
    from bench.reliability.scenarios.harness_faults import proxy_5xx

    # the policy outage's 503s (the retryable PolicyUnavailable the harness waits out) are not failures
    report.server_errors = proxy_5xx(stack.proxy_url, stack.token, besides=("503",))
    return report


def _stop_dockerd(report: FaultReport, docker_client: Any, stack: ServiceStack, image: str, workdir: Path) -> float:
    from bench.reliability.scenarios.dockerd_outage import stop_dockerd

    report.outage = stop_dockerd(docker_client, network=NETWORK, image=image, proxy_url=stack.proxy_url,
                                 proxy_host=stack.proxy_name, published_url=stack.published_url, workdir=workdir)
    report.problems += report.outage.problems
    return report.outage.seconds


def _kill_and_start(service: HostService, *, pause_s: float) -> float:
    service.kill9()
    time.sleep(pause_s)  # compose restarts a dead container within a second or two
    return service.start() + pause_s


def check_console(report: FaultReport, console: HostService, job_name: str, *, running: bool,
                  rollouts: int = 0) -> None:
    """The restarted console serves the job: running mid-job; at the end every step and every archived
    rollout (it reads the job folder, so the kill cost the job nothing and the console nothing)."""
    try:
        summary = httpx.get(f"{console.url}/api/jobs/{job_name}/metrics", timeout=30).raise_for_status().json()
        page = httpx.get(f"{console.url}/api/jobs/{job_name}/rollouts", timeout=30).raise_for_status().json()
        html = httpx.get(f"{console.url}/jobs/{job_name}", timeout=30).raise_for_status().text
    except httpx.HTTPError as error:
        report.problems.append(f"the restarted console did not serve job {job_name}: {error!r}")
        return
    if job_name not in html:
        report.problems.append(f"the restarted console's job page does not name {job_name}")
    if running and summary["status"] != "running":
        report.problems.append(f"the restarted console shows job {job_name} {summary['status']}, not running")
    if not running and (summary["status"], summary["steps_done"], page["total"]) != ("finished", len(FAULTS) + 1,
                                                                                     rollouts):
        report.problems.append(f"the console shows {summary['status']}, {summary['steps_done']} steps,"
                               f" {page['total']} rollouts; expected finished, {len(FAULTS) + 1}, {rollouts}")


def check_archive(report: FaultReport, job_dir: Path, outputs: Path, control: Any, *, per_step: int) -> None:
    from veri.archive import ArchiveIndex, read_metrics

    torn = [path for path in job_dir.rglob("*.json") if not _whole_json(path)]
    report.problems += [f"torn record: {path}" for path in torn]
    metrics = read_metrics(job_dir / "metrics.jsonl")
    steps = [line["step"] for line in metrics]
    if steps != list(range(len(FAULTS) + 1)):
        report.problems.append(f"metrics.jsonl steps {steps}, expected each of 0..{len(FAULTS)} once")
    with ArchiveIndex(job_dir) as index:
        rows = index.rollouts(limit=100_000)
        records = [index.read_rollout(index.layout.inside(row["path"])) for row in rows]
    on_disk = sorted(p.relative_to(job_dir).as_posix() for p in (job_dir / "trajectories").rglob("rollout-*.json"))
    keys = [(r.policy_step, r.task_index, r.rollout_index) for r in records]
    if len(set(keys)) != len(keys) or len(on_disk) != len(keys):
        report.problems.append(f"duplicated rollouts: {len(keys)} indexed, {len(set(keys))} distinct,"
                               f" {len(on_disk)} files")
    per = {step: [r for r in records if r.policy_step == step] for step in steps}
    for step, found in per.items():
        if len(found) != per_step:
            report.problems.append(f"step {step}: {len(found)} rollouts archived, expected {per_step}")
    for record in records:
        report.rollouts += 1
        where = f"step {record.policy_step} task {record.task_index} rollout {record.rollout_index}"
        infra = any(v.details.get("infrastructure_error") for v in record.verdicts)
        if record.status != "completed":
            if record.trainable or record.reward is not None:
                report.problems.append(f"{where}: {record.status} but scored ({record.reward})")
            if not infra and record.policy_step == FAULTS.index("proxy"):
                report.gave_up += 1  # it stopped retrying before the proxy was back: harness_failed, masked
            elif not infra:
                stderr = next((v.details["stderr_tail"] for v in record.verdicts if "stderr_tail" in v.details), "")
                report.problems.append(f"{where}: {record.status} without an infrastructure_error:"
                                       f" {[v.message for v in record.verdicts]}; stderr {stderr[-600:]!r}")
            report.masked_infra += infra
        elif record.policy_step == FAULTS.index("policy") and any(
                v.rule.value in ("policy_server_restarted", "policy_version_stale") for v in record.verdicts):
            report.stale_masked += 1  # what the restarted server served: masked, never trained on
        elif record.reward is None or not record.trainable:
            report.problems.append(f"{where}: completed but not trained: {[v.rule.value for v in record.verdicts]}")
        calls = outputs / record.rollout_id / "calls"
        answered = int(calls.read_text()) if calls.is_file() else 0
        spans = len(record.spans)
        if infra and answered > spans:
            # a sandbox its dead launcher left ran on until the new one removed it: a call in flight when
            # the trainer closed the session is answered after the spans were read. The store has it.
            spans = len(control.spans(record.rollout_id))
            report.late_spans += spans - len(record.spans)
        if answered > spans:
            report.spans_lost += answered - spans
            report.problems.append(f"{where}: {answered} calls answered, {spans} spans")
    for record in per.get(FAULTS.index("dockerd"), []):
        status = str(getattr(record.status, "value", record.status))
        report.dockerd_step[status] = report.dockerd_step.get(status, 0) + 1
    launcher_step = per.get(FAULTS.index("launcher"), [])
    if not any(r.status != "completed" for r in launcher_step):
        report.problems.append("the launcher's kill failed no rollout: was it killed mid-step?")


def _whole_json(path: Path) -> bool:
    try:
        json.loads(path.read_bytes())
    except ValueError:
        return False
    return True


# --- disk full ------------------------------------------------------------------------------------------

@contextlib.contextmanager
def small_volume(size_mb: int) -> Iterator[Path]:
    """A tmpfs of `size_mb` MB (needs root): the state volume of the disk-full run."""
    folder = Path(tempfile.mkdtemp(prefix="veri-full-volume-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
        folder.rmdir()


def disk_full_job(*, stack: ServiceStack, model: Path, image: str, workdir: Path, volume: Path) -> list[str]:
    """A job whose archive is on `volume`; once its first step is archived a filler takes every free
    byte. The trainer must stop, naming the volume; nothing on it half-written. Returns problems."""
    job_name = f"disk-full-{uuid.uuid4().hex[:6]}"
    job = write_job(workdir / "full-job", model, tasks=1, calls=1, max_steps=4)
    trainer = Trainer(stack, job, image, volume, job_name, workdir / "logs")
    trainer.start()
    metrics = volume / job_name / "metrics.jsonl"
    deadline = time.monotonic() + 600
    while not (metrics.is_file() and metrics.read_text().strip()) and time.monotonic() < deadline:
        if not trainer.running():
            return [f"the trainer exited before its first step: {trainer.tail()}"]
        time.sleep(0.2)
    with contextlib.suppress(OSError), open(volume / "filler", "wb", buffering=0) as filler:
        while True:
            filler.write(b"\0" * (1 << 20))
    code = trainer.wait(timeout=600)
    log = trainer.tail()
    problems = []
    if code == 0:
        problems.append("the trainer finished on a full volume")
    elif "no space left" not in log.lower() or str(volume) not in log:
        problems.append(f"the trainer's last words do not name the full volume: {log[-1500:]}")
    job_file = volume / job_name / "job.json"
    info = json.loads(job_file.read_bytes()) if job_file.is_file() else {}
    if info.get("status") != "failed" or "no space left" not in str(info.get("error")).lower():
        problems.append(f"job.json: {info.get('status')!r}, error {info.get('error')!r}")
    problems += [f"half-written: {path}" for path in (volume / job_name).rglob("*.json") if not _whole_json(path)]
    from veri.archive import read_metrics

    try:
        read_metrics(metrics)
    except ValueError as error:
        problems.append(f"metrics.jsonl unreadable: {error}")
    return problems


def _is_root() -> bool:
    return os.geteuid() == 0


def run(quick: bool) -> dict[str, Any]:
    from bench.reliability.scenarios.harness_faults import sandbox_preflight

    row = failing_row(NAME)
    model = ROOT / "build" / "models" / "tiny"
    client, refused = sandbox_preflight(row)
    if refused is not None:
        return refused
    from bench.reliability.scenarios.dockerd_outage import unstoppable

    problems: list[str] = []
    if (why := unstoppable(client)) is not None:
        return {**row, "notes": f"dockerd cannot be stopped here: {why}"}
    with tempfile.TemporaryDirectory(prefix="veri-service-faults-") as tmp:
        folder = Path(tmp)
        image = build_image(client, folder / "vendor")
        try:
            with service_stack(client, model, folder) as stack:
                report = run_faults(docker_client=client, stack=stack, model=model, image=image, workdir=folder,
                                    quick=quick)
                if _is_root():
                    with small_volume(8) as volume:
                        problems = disk_full_job(stack=stack, model=model, image=image, workdir=folder,
                                                 volume=volume)
                else:
                    problems = ["disk full not run: mounting a tmpfs needs root"]
        finally:
            remove_image(client, image)
    client.close()
    problems = report.problems + problems
    row.update(runs=report.rollouts, spans_lost=report.spans_lost, escapes=report.escapes)
    row["5xx"] = report.server_errors
    if problems or report.spans_lost or report.escapes or report.server_errors:
        return {**row, "notes": f"{len(problems)} problems, first: {(problems or ['-'])[0][:400]}"}
    restarts = ", ".join(f"{name} back in {seconds:.1f} s" for name, seconds in report.restarts.items())
    outage = report.outage
    return {**row, "outcome": "pass",
            "notes": f"{len(FAULTS) + 1} steps, mid-step: kill -9 of proxy, launcher, console, policy, trainer, "
                     f"dockerd stopped ({restarts}); dockerd step: {_counts(report.dockerd_step)}, the launcher's "
                     f"docker calls retried for {max(report.launcher_away_s):.1f} s, the proxy answered a "
                     f"probe sandbox {outage.probe_answers} times while dockerd was down, the probe's exit "
                     f"{outage.probe_exit} read after, published 127.0.0.1 port {outage.published_down} meanwhile "
                     f"(back {outage.published_back_s:.1f} s after dockerd); "
                     f"{report.gave_up} gave up on the proxy, {report.masked_infra} masked as "
                     f"infrastructure_error ({report.late_spans} spans "
                     f"answered after their session closed: in the store only), {report.stale_masked} masked as "
                     f"policy_server_restarted (served by the restarted policy), the rest trained; resumed "
                     f"from checkpoint {FAULTS.index('trainer')}; disk full: stopped naming the volume, nothing torn; "
                     f"{report.seconds:.0f} s"}


def _counts(by_status: dict[str, int]) -> str:
    return ", ".join(f"{count} {status}" for status, count in sorted(by_status.items())) or "no rollouts"
