"""A policy server restarted mid-job serves its model folder's weights until the next weight update; the
rollouts it served meanwhile are rejected before scoring (`policy_server_restarted`), with real servers
restarted: the hf policy server under `veri train`, and the vLLM stand-in (a new process on the same port,
as a restarted `vllm serve` container), whose spans carry the version the trainer announced, not the one
it served."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import AbstractContextManager
from pathlib import Path
from types import SimpleNamespace

import httpx
import openai
import pytest
from transformers import AutoTokenizer

from testkit.servers import free_port, start_server
from testkit.trainer_jobs import MAX_TOKENS, write_job, write_tasks
from tests.trainer.test_train import veri_train
from veri.archive import ArchiveIndex, read_metrics
from veri.core.episodes import RolloutStatus, build_episode
from veri.core.launch import LaunchResult
from veri.core.rollout_record import RolloutRecord
from veri.core.rules import Rule
from veri.loop.collect.collect import CollectedRollout
from veri.services.policy.vllm.admin_client import VllmAdmin
from veri.services.proxy.control_client import ControlClient
from veri.services.trainer.grpo.rollout_func import HarnessRollouts
from veri.services.trainer.weights.served import CLOCK_SLACK_S, ServedWeights
from veri.services.trainer.weights.sync import announce_version

pytestmark = pytest.mark.needs("process")

STANDIN = Path(__file__).parents[1] / "vllm_standin.py"


@pytest.mark.slow


def test_an_hf_policy_server_restarted_mid_job_has_its_rollouts_rejected_and_gets_the_weights_again(
        tiny_model, trainer_script, tmp_path):
    """Step 1's first rollout waits after its first call; the test restarts the policy server (a new process
    on the same port: the model folder's weights, version 0) and lets it finish. Every step-1 rollout with a
    span the server served since the job last saw its old process is rejected; the job goes on, the server
    gets the trainer's weights again after the step, and step 2 trains as usual."""
    restart = {"runs": str(tmp_path / "runs"), "on_run": 2, "ready": str(tmp_path / "ready"),
               "done": str(tmp_path / "done")}
    job = write_job(tmp_path / "job", tiny_model)
    write_tasks(tmp_path / "job" / "tasks.jsonl", [  # calls made while the server restarts are retried (503)
        {"prompt": "Look up the answer, please.", "expected": "beta", "restart": restart, "retries": 6},
        {"prompt": "Look up the answer now.", "expected": "beta", "retries": 6},
    ])
    port = free_port()
    policy_args = ["serve", "policy", "--model", str(tiny_model), "--scripted-replies", str(trainer_script),
                   "--threads", "1"]
    with policy_server(policy_args, port) as policy:
        proxy_args = ["serve", "proxy", "--policy-url", policy.url, "--model", str(tiny_model),
                      "--store", str(tmp_path / "spans"), "--max-tokens", str(MAX_TOKENS)]
        with start_server(proxy_args) as proxy:
            stack = (SimpleNamespace(url=policy.url), proxy)
            trained = in_background(lambda: veri_train(job, stack, tmp_path / "jobs"))
            wait_for_file(Path(restart["ready"]), trained)
            policy.restart()
            Path(restart["done"]).write_text("restarted")
            result = trained.result(timeout=600)
    assert result.returncode == 0, result.stderr[-6000:]

    job_dir = tmp_path / "jobs" / "job"
    metrics = read_metrics(job_dir / "metrics.jsonl")
    assert [line["step"] for line in metrics] == [0, 1, 2]
    assert [line["rule/policy_server_restarted"] for line in metrics] == [0, 4, 0]
    with ArchiveIndex(job_dir) as index:
        records = {(row["step"], row["task_index"], row["rollout_index"]): index.read_rollout(row["path"])
                   for row in index.rollouts(limit=100)}
    held = records[(1, 0, 0)]
    [verdict] = [v for v in held.verdicts if v.rule == Rule.POLICY_SERVER_RESTARTED]
    assert verdict.message.startswith(f"span 0 was served by the policy server at {policy.url} after it restarted")
    assert held.spans[-1].policy_version == 0  # the new process: the model folder's weights
    assert not held.trainable and all(not r.trainable for (step, _, _), r in records.items() if step == 1)
    assert all(Rule.POLICY_SERVER_RESTARTED not in {v.rule for v in r.verdicts}
               for (step, _, _), r in records.items() if step != 1)
    assert metrics[2]["trainable"] == 4 and metrics[2]["policy_version/stale_spans"] == 0  # back to the job's weights
    log = (job_dir / "logs" / "train.log").read_text()
    assert "policy server at version 0 after step 1, expected 1: it restarted" in log
    assert "step 1: 4 rollout(s) rejected, a policy server restarted while they ran" in log


def test_a_restarted_vllm_server_is_caught_though_its_spans_carry_the_announced_version(tiny_model, tmp_path):
    """vLLM reports no version: the proxy stamps the one announced (3), and a restarted server's spans carry it
    while it serves its model folder's weights. The stand-in answers `veri_server_process` as veri's worker
    extension does; restarted, it is another process. A call the job saw served by the old process stays."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    reply = tokenizer.encode("hi", add_special_tokens=False) + [tokenizer.eos_token_id]
    port = free_port()
    standin = [sys.executable, str(STANDIN), "--port", str(port), "--reply-ids", json.dumps(reply), "--no-version"]
    lines: list[str] = []
    with standin_process(standin, port) as policy:
        proxy_args = ["serve", "proxy", "--policy-url", policy.url, "--model", str(tiny_model),
                      "--store", str(tmp_path / "spans"), "--max-tokens", str(MAX_TOKENS)]
        with start_server(proxy_args) as proxy:
            control = ControlClient(proxy.url)
            served = ServedWeights([VllmAdmin(policy.url, timeout_s=30)], control.replicas, lines.append)
            announce_version(control, 3)
            served.noted()  # step 3's weights are in
            before = call(control)
            time.sleep(CLOCK_SLACK_S + 0.5)
            served.unvouched()  # a look at the server (a step's check): still the process that got the weights
            policy.restart()
            after = call(control)
            checked = HarnessRollouts._reject_restarted(
                SimpleNamespace(served=served, archive=SimpleNamespace(log=lines.append)),  # type: ignore[arg-type]
                3, [collected(before), collected(after)])
            served.noted()  # the next sync loaded the job's weights into it
    assert [span.policy_version for span in before + after] == [3, 3]  # the announced version, both
    assert [[v.rule for v in r.record.episode.verdicts] for r in checked] == [[], [Rule.POLICY_SERVER_RESTARTED]]
    assert "step 3: 1 rollout(s) rejected, a policy server restarted while they ran" in lines[0]
    assert f"the policy server at {policy.url} restarted" in lines[-1]


class Restartable:
    """A server on a fixed port that the test restarts: the running process stopped, a new one started."""

    def __init__(self, start: Callable[[], AbstractContextManager], port: int) -> None:
        self._start, self.url = start, f"http://127.0.0.1:{port}"
        self._running = start()
        self._running.__enter__()

    def restart(self) -> None:
        self.close()
        self._running = self._start()
        self._running.__enter__()

    def close(self) -> None:
        self._running.__exit__(None, None, None)


@contextlib.contextmanager
def restartable(start: Callable[[], AbstractContextManager], port: int) -> Iterator[Restartable]:
    server = Restartable(start, port)
    try:
        yield server
    finally:
        server.close()


def policy_server(args: list[str], port: int) -> AbstractContextManager[Restartable]:
    return restartable(lambda: start_server(args, port=port), port)


def standin_process(command: list[str], port: int) -> AbstractContextManager[Restartable]:
    return restartable(lambda: standin(command, port), port)


@contextlib.contextmanager
def standin(command: list[str], port: int) -> Iterator[subprocess.Popen]:
    """The vLLM stand-in as a process, answering on `port` while the context is open."""
    process = subprocess.Popen(command)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline and process.poll() is None, "the stand-in did not start"
                time.sleep(0.1)
        yield process
    finally:
        process.terminate()
        process.wait()


def call(control: ControlClient) -> list:
    """One chat call in a session of its own, through the proxy; its spans."""
    session = control.open_session()
    openai.OpenAI(base_url=session.openai_base_url, api_key=session.api_key).chat.completions.create(
        model="policy", messages=[{"role": "user", "content": "hello"}])
    return control.spans(session.rollout_id)


def collected(spans: list) -> CollectedRollout:
    rollout_id = spans[0].rollout_id
    record = RolloutRecord(rollout_id=rollout_id, task_index=0, rollout_index=0, status=RolloutStatus.COMPLETED,
                           spans=spans, episode=build_episode(spans))
    return CollectedRollout(record, LaunchResult(rollout_id=rollout_id, status=RolloutStatus.COMPLETED, exit_code=0,
                                                 started_at=0.0, duration_s=1.0))


def in_background(function: Callable[[], subprocess.CompletedProcess]) -> Future:
    done: Future = Future()
    threading.Thread(target=lambda: done.set_result(function()), daemon=True).start()
    return done


def wait_for_file(path: Path, job: Future, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if job.done():
            pytest.fail(f"the job ended before {path.name} appeared: {job.result().stderr[-4000:]}")
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.2)
