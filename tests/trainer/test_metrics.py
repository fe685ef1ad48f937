"""`veri train --metrics-port`: scraped while a real job runs (tiny model, local sandboxes, a real proxy
and hf policy), the figures equal the archive's metrics lines of the steps completed at that scrape."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import httpx
import pytest

from testkit.servers import free_port
from testkit.trainer_jobs import write_job
from tests.prometheus import Scrape
from veri.archive import read_metrics
from veri.core.episodes import RolloutStatus
from veri.core.rules import Rule

pytestmark = [pytest.mark.needs("process"), pytest.mark.slow]

PHASES = ("rollout", "reward", "train", "weight_sync")


def test_a_running_job_serves_its_step_metrics(stack, tiny_model, tmp_path):
    policy, proxy = stack
    job, port = write_job(tmp_path / "job", tiny_model, max_steps=2), free_port()
    command = [sys.executable, "-m", "veri.cli", "train", str(job), "--sandbox", "local", "--proxy-url", proxy.url,
               "--policy-url", policy.url, "--output", str(tmp_path / "jobs"), "--base-dir", str(job.parent),
               "--metrics-port", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    scrapes: list[Scrape] = []
    deadline = time.monotonic() + 300
    while process.poll() is None and time.monotonic() < deadline:
        try:
            reply = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
            scrapes.append(Scrape(reply.text))
        except httpx.TransportError:  # not listening yet, or the job has just ended
            pass
        time.sleep(0.1)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err[-6000:]

    # The endpoint was up from the start: a scrape before any step completed, then one after each.
    completed = [int(scrape.value("veri_trainer_steps_completed_total")) for scrape in scrapes]
    assert completed[0] == 0 and completed == sorted(completed) and completed[-1] >= 1, completed
    last = scrapes[-1]
    done = completed[-1]
    lines = read_metrics(tmp_path / "jobs" / "job" / "metrics.jsonl")[:done]
    assert [line["step"] for line in lines] == list(range(done))

    for status in RolloutStatus:
        expected = sum(line[f"status/{status}"] for line in lines)
        assert last.value("veri_trainer_rollouts_total", status=status) == expected
    for rule in Rule:
        assert last.value("veri_trainer_rollout_rules_total", rule=rule) == sum(line[f"rule/{rule}"] for line in lines)
    # The job's shape (tests/trainer/conftest.py): 4 rollouts a step, one crashes on purpose.
    assert last.value("veri_trainer_rollouts_total", status="failed") == done
    assert last.value("veri_trainer_rollouts_total") == 4 * done
    assert last.value("veri_trainer_rollouts_masked_total") == sum(line["masked"] for line in lines) == done
    for phase in PHASES:
        assert last.value("veri_trainer_step_phase_seconds_count", phase=phase) == done
        assert last.value("veri_trainer_step_phase_seconds_sum", phase=phase) == pytest.approx(
            sum(line[f"time/{phase}_s"] for line in lines))
    assert last.value("veri_trainer_step_seconds_count") == done
    assert last.value("veri_trainer_policy_version") == lines[-1]["policy_version/max"] == done - 1
    assert last.value("veri_trainer_reward_mean") == pytest.approx(lines[-1]["reward/mean"])
    assert last.value("veri_trainer_step") >= done - 1
    # The running step's rollouts, counted as they finish: never more than the step has, all of them at its end.
    progress = [(s.value("veri_trainer_step_rollouts", state="done"), s.value("veri_trainer_step_rollouts",
                                                                               state="total")) for s in scrapes]
    assert all(done_now <= total for done_now, total in progress) and (4, 4) in progress, progress


def test_a_taken_metrics_port_is_a_one_line_error(tiny_model, tmp_path):
    job = write_job(tmp_path / "job", tiny_model)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "veri.cli", "train", str(job), "--sandbox", "local", "--base-dir", str(job.parent),
             "--output", str(tmp_path / "jobs"), "--metrics-port", str(port)],
            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert result.stderr.startswith(f"veri train: --metrics-port {port} on 127.0.0.1:")
    assert "pick a free port or leave --metrics-port off" in result.stderr and "Traceback" not in result.stderr
