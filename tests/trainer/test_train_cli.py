"""`veri train` refusing to start or stopping on an expected failure: one line that says why, exit 1, no
traceback (services/trainer/errors.py). No real servers needed."""

from __future__ import annotations

import contextlib
import json
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from testkit.servers import free_port
from testkit.trainer_jobs import MAX_TOKENS, write_job
from veri.archive import JobArchive
from veri.cli import main
from veri.services.launcher.errors import SandboxUnavailable
from veri.services.policy.hf.admin_client import PolicyAdminError
from veri.services.trainer import job as job_module
from veri.services.trainer.errors import WeightSyncError


def veri(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "veri.cli", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.needs("process")
def test_an_unreachable_proxy_is_a_one_line_error(tiny_model, tmp_path):
    job = write_job(tmp_path, tiny_model)
    url = f"http://127.0.0.1:{free_port()}"
    result = veri("train", str(job), "--base-dir", str(tmp_path), "--sandbox", "local", "--proxy-url", url,
                  "--output", str(tmp_path / "jobs"))
    assert result.returncode == 1
    assert result.stderr.startswith(f"veri train: the capture proxy at {url} is not reachable")
    assert "Traceback" not in result.stderr and not (tmp_path / "jobs").exists()


@pytest.mark.needs("process")
def test_config_problems_are_listed_before_anything_starts(tiny_model, tmp_path):
    job = write_job(tmp_path, tiny_model, max_step=3)
    result = veri("train", str(job), "--base-dir", str(tmp_path), "--sandbox", "local")
    assert result.returncode == 1 and "max_step: is not a known key" in result.stderr


@pytest.mark.needs("process")
def test_without_an_image_it_prints_the_commands_that_run_the_job(tiny_model, tmp_path):
    """As `veri eval` on its own (tests/evals/test_alone.py, the same code: rollouts/stack_args.py): nothing starts,
    and the refusal gives make train with the job's RESUME and NAME, and by hand the bundle's build then
    veri train with every option given."""
    job = write_job(tmp_path, tiny_model)
    result = veri("train", str(job), "--base-dir", str(tmp_path), "--name", "demo", "--resume",
                  "--output", str(tmp_path / "jobs"))
    assert result.returncode == 1 and "Traceback" not in result.stderr and result.stdout == ""
    lines = [line.strip() for line in result.stderr.splitlines()]
    assert lines[0].startswith("veri train: --sandbox docker runs the harness bundle's image, and no --image")
    assert f"make train CONFIG={job} RESUME=1 NAME=demo" in lines
    assert f"veri harness build {tmp_path / 'bundle'}   # prints IMAGE" in lines
    by_hand = next(line for line in lines if line.startswith("veri train "))
    assert shlex.split(by_hand)[2:] == [str(job), "--resume", "--name", "demo", "--output", str(tmp_path / "jobs"),
                                        "--base-dir", str(tmp_path), "--sandbox", "docker", "--image", "IMAGE"]
    assert not (tmp_path / "jobs").exists()  # nothing started, nothing written
    launcher = veri("train", str(job), "--base-dir", str(tmp_path), "--sandbox", "launcher")
    assert launcher.returncode == 1 and f"make train CONFIG={job}\n" in launcher.stderr
    assert "--sandbox launcher --image IMAGE" in launcher.stderr and "--name" not in launcher.stderr


# What write_job's proxy samples with (GET /control/config): the start-up check compares it with the job.
CAPTURE_CONFIG = json.dumps({"renderer": "auto", "temperature": 1.0, "top_p": 1.0, "max_tokens": MAX_TOKENS,
                             "model_fingerprint": "-"}).encode()


class _Healthy(BaseHTTPRequestHandler):
    """Answers 200 to every GET: a proxy and a policy server as far as the start-up checks go."""

    config = CAPTURE_CONFIG

    def do_GET(self) -> None:
        body = self.config if self.path == "/control/config" else b'{"status": "ok"}'
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


class _NotAProxy(_Healthy):
    config = b'{"status": "ok"}'


@contextlib.contextmanager
def healthy_server(handler: type[_Healthy] = _Healthy) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


@pytest.mark.needs("process")
def test_an_archive_another_trainer_holds_is_a_one_line_error(tiny_model, tmp_path):
    job = write_job(tmp_path, tiny_model)
    with healthy_server() as url, JobArchive(tmp_path / "jobs", "job"):
        result = veri("train", str(job), "--base-dir", str(tmp_path), "--sandbox", "local", "--proxy-url", url,
                      "--policy-url", url, "--output", str(tmp_path / "jobs"))
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith(f"veri train: another trainer is writing the archive {tmp_path / 'jobs' / 'job'}")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


@pytest.mark.needs("process")
def test_a_proxy_url_that_is_not_veri_s_proxy_is_a_one_line_error(tiny_model, tmp_path):
    """It answers /health, but not how it samples: the job cannot know its spans' distribution."""
    job = write_job(tmp_path, tiny_model)
    with healthy_server(_NotAProxy) as url:
        result = veri("train", str(job), "--base-dir", str(tmp_path), "--sandbox", "local", "--proxy-url", url,
                      "--policy-url", url, "--output", str(tmp_path / "jobs"))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith(f"veri train: the service at {url} does not say how it samples")
    assert "point --proxy-url at veri's capture proxy" in result.stderr and not (tmp_path / "jobs").exists()


@pytest.fixture
def stop_handlers_restored() -> Iterator[None]:
    """`veri train` in this process installs its SIGINT/SIGTERM handlers; put pytest's back."""
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


@pytest.mark.parametrize("error", [
    WeightSyncError("the policy server is at version 7 after step 0, expected 0: give the job its own policy server"),
    PolicyAdminError("policy server", "http://127.0.0.1:1", "POST", "/update_weights", 500, "boom",
                     "see the service's log"),
    SandboxUnavailable("dockerd has no runsc (gVisor) runtime: run `make docker`"),
])
def test_failures_mid_job_are_one_line(error, tiny_model, tmp_path, monkeypatch, capsys, stop_handlers_restored):
    def run_job(config, options):
        raise error

    monkeypatch.setattr(job_module, "run_job", run_job)
    job = write_job(tmp_path, tiny_model)
    assert main(["train", str(job), "--base-dir", str(tmp_path), "--sandbox", "local"]) == 1
    captured = capsys.readouterr()
    assert captured.err == f"veri train: {error}\n" and captured.out == ""
