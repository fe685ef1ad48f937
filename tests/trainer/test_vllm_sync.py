"""The `filesystem` weight sync into vLLM servers (services/trainer/weights/vllm_sync.py), against vLLM's routes as
an httpx MockTransport answers them; the real servers: tests/stack/test_train_vllm.py."""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

import httpx
import pytest
import torch

from veri.services.policy.vllm import WORKER_EXTENSION
from veri.services.policy.vllm.admin_client import LOADED_METHOD, RELOAD_METHOD, VllmAdmin
from veri.services.trainer.errors import WeightSyncError
from veri.services.trainer.weights.vllm_sync import FilesystemSync, TimedSync, release_held


def trainer_at(step: int) -> SimpleNamespace:
    return SimpleNamespace(model=torch.nn.Linear(2, 2), state=SimpleNamespace(global_step=step))


def server(calls: list, answer=None, *, reset: bool = True, fail: Exception | None = None,
           stays_asleep: bool = False, url: str = "http://policy:8001", loaded: list | None = None) -> VllmAdmin:
    """`loaded`: what `veri_loaded_weights` answers (default: the last folder loaded, as veri's worker)."""
    asleep: set[str] = set()  # vLLM's sleeping tags
    held: list = [None]

    def handle(request: httpx.Request) -> httpx.Response:
        if fail is not None:
            raise fail
        body = json.loads(request.content or b"{}")
        path = request.url.path
        calls.append((path, body) if path != "/wake_up" else (path, request.url.params.get("tags")))
        if path == "/collective_rpc" and body["method"] == LOADED_METHOD:
            return httpx.Response(200, json={"results": loaded if loaded is not None else [held[0]]})
        if path == "/collective_rpc":
            folder = body["args"][0]
            held[0] = {"folder": folder, "fingerprint": "f"}
            return httpx.Response(200, json={"results": answer or [{"folder": folder, "retied": []}]})
        if path == "/sleep":
            asleep.update({"weights", "kv_cache"})
            return httpx.Response(200)  # vLLM answers these with no body
        if path == "/wake_up":
            if not stays_asleep:
                asleep.difference_update(request.url.params.get_list("tags") or {"weights", "kv_cache"})
            return httpx.Response(200)
        if path == "/is_sleeping":
            return httpx.Response(200, json={"is_sleeping": bool(asleep)})
        return httpx.Response(200, json={"success": reset})

    return VllmAdmin(url, timeout_s=5, transport=httpx.MockTransport(handle))


def rpc_paths(calls: list) -> list[str]:
    return [body["method"] if path == "/collective_rpc" else path for path, body in calls]


def test_each_server_loads_the_step_folder_and_drops_its_prefix_cache(tmp_path):
    calls_a, calls_b, timings, lines = [], [], {}, []
    sync = FilesystemSync(trainer_at(0), [server(calls_a), server(calls_b)], tmp_path, report=lines.append,
                          timing=timings.__setitem__)
    sync.sync_weights()
    sync.trainer.state.global_step = 1
    sync.sync_weights()
    for calls in (calls_a, calls_b):  # from the second sync on, each says first what it holds
        assert rpc_paths(calls) == [RELOAD_METHOD, "/reset_prefix_cache", LOADED_METHOD, RELOAD_METHOD,
                                    "/reset_prefix_cache"]
        rpc = calls[3][1]
        assert rpc["method"] == RELOAD_METHOD and rpc["args"] == [str(tmp_path / "step-000001")]
    assert [p.name for p in tmp_path.iterdir()] == ["step-000001"]  # step 0's files went once loaded
    assert (tmp_path / "step-000001" / "model.safetensors").is_file()
    assert timings["weight_sync"] > 0 and "step 1: weights loaded by 2 policy server(s)" in lines[-1]


def test_a_server_that_does_not_answer_fails_the_step_by_name(tmp_path):
    hung = server([], fail=httpx.ReadTimeout("timed out"))
    sync = FilesystemSync(trainer_at(3), [hung], tmp_path, report=print, timing=lambda *a: None)
    expected = r"http://policy:8001 did not load the weights of step 3 \(no answer within 5 s: ReadTimeout"
    with pytest.raises(WeightSyncError, match=expected):
        sync.sync_weights()


def test_a_server_without_veris_worker_extension_is_named(tmp_path):
    plain = server([], answer=[None])  # vLLM's own reload answers nothing
    sync = FilesystemSync(trainer_at(0), [plain], tmp_path, report=print, timing=lambda *a: None)
    with pytest.raises(WeightSyncError, match="--worker-extension-cls " + WORKER_EXTENSION):
        sync.sync_weights()


def test_a_prefix_cache_that_stays_fails_the_step(tmp_path):
    sync = FilesystemSync(trainer_at(0), [server([], reset=False)], tmp_path, report=print, timing=lambda *a: None)
    with pytest.raises(WeightSyncError, match="kept its prefix cache"):
        sync.sync_weights()


def test_sleep_mode_sleeps_after_the_rollouts_and_wakes_weights_before_loading_them(tmp_path):
    calls, timings = [], {}
    sync = FilesystemSync(trainer_at(0), [server(calls)], tmp_path, report=print, timing=timings.__setitem__,
                          sleep_mode=True, free_cache=lambda: calls.append(("empty_cache", None)))
    sync.sync_weights()  # step 0: a fresh server is awake; waking it is harmless (vLLM only warns)
    sync.sleep(0)  # the rollout function, once step 0's rollouts are in
    sync.trainer.state.global_step = 1
    sync.sync_weights()
    sync.wake()  # the job ends
    paths = [(path, detail if path == "/wake_up" else None) for path, detail in calls
             if not (path == "/collective_rpc" and detail["method"] == LOADED_METHOD)]
    # The trainer's CUDA cache is emptied before vLLM wakes its weights, so the KV cache fits again.
    one_sync = [("empty_cache", None), ("/wake_up", "weights"), ("/collective_rpc", None), ("/wake_up", "kv_cache"),
                ("/is_sleeping", None), ("/reset_prefix_cache", None)]
    assert paths == [*one_sync, ("/sleep", None), *one_sync, ("/wake_up", None)]
    assert timings["policy_sleep"] >= 0 and timings["weight_sync"] > 0


def test_sleep_mode_reports_the_gpu_memory_the_sleep_gave_back(tmp_path):
    """On the GPU the trainer and vLLM share, the free memory before and after the servers sleep (every
    process's use counted): bench/gpu_check.sh's "sleep freed GiB". Without CUDA nothing is measured."""
    figures, free = {}, iter([10.5, 52.0])
    sync = FilesystemSync(trainer_at(0), [server([])], tmp_path, report=print, timing=lambda *a: None,
                          sleep_mode=True, figure=figures.__setitem__, free_memory=lambda: next(free))
    sync.sleep(0)
    assert figures == {"policy/sleep_freed_gib": 41.5}
    on_cpu = FilesystemSync(trainer_at(0), [server([])], tmp_path, report=print, timing=lambda *a: None,
                            sleep_mode=True, figure=figures.__setitem__)  # torch without CUDA here
    figures.clear()
    on_cpu.sleep(0)
    assert figures == {}


def test_without_sleep_mode_nothing_sleeps(tmp_path):
    calls = []
    sync = FilesystemSync(trainer_at(0), [server(calls)], tmp_path, report=print, timing=lambda *a: None)
    sync.sleep(0)
    sync.wake()
    assert calls == []


def test_a_server_that_stays_asleep_fails_the_step_by_name(tmp_path):
    sync = FilesystemSync(trainer_at(2), [server([], stays_asleep=True)], tmp_path, report=print,
                          timing=lambda *a: None, sleep_mode=True)
    sync.sleep(1)
    with pytest.raises(WeightSyncError, match="still sleeps after waking its weights and KV cache for step 2"):
        sync.sync_weights()


def test_a_server_without_the_sleep_routes_is_named(tmp_path):
    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, json={"detail": "Not Found"})

    missing = VllmAdmin("http://policy:8001", timeout_s=5, transport=httpx.MockTransport(handle))
    sync = FilesystemSync(trainer_at(1), [missing], tmp_path, report=print, timing=lambda *a: None, sleep_mode=True)
    with pytest.raises(WeightSyncError, match="did not go to sleep for step 1 .*VLLM_SERVER_DEV_MODE=1"):
        sync.sleep(1)


def test_every_server_is_loaded_and_each_failure_is_named_with_the_ones_that_hold_the_step(tmp_path):
    calls_b = []
    dead = server([], fail=httpx.RemoteProtocolError("Server disconnected without sending a response."),
                  url="http://policy-0:8001")
    sync = FilesystemSync(trainer_at(2), [dead, server(calls_b, url="http://policy-1:8001")], tmp_path,
                          report=print, timing=lambda *a: None)
    with pytest.raises(WeightSyncError) as failed:
        sync.sync_weights()
    message = str(failed.value)
    assert message.startswith("1 of 2 vLLM policy server(s) did not take step 2's weights; http://policy-1:8001")
    assert "http://policy-0:8001 did not load the weights of step 2" in message
    assert "(no answer: RemoteProtocolError: Server disconnected without sending a response.; the server died" \
        in message
    assert "RESUME=1" in message
    assert rpc_paths(calls_b) == [RELOAD_METHOD, "/reset_prefix_cache"]  # the second was loaded all the same
    assert (tmp_path / "step-000002").is_dir()  # kept: not every server holds it


def test_a_server_that_restarted_is_reinitialised_and_the_step_goes_on(tmp_path):
    calls, lines = [], []
    restarted = server(calls, loaded=[None])  # its worker loaded nothing since it started
    sync = FilesystemSync(trainer_at(0), [restarted], tmp_path, report=lines.append, timing=lambda *a: None)
    sync.sync_weights()
    sync.trainer.state.global_step = 1
    sync.sync_weights()
    assert "restarted since it loaded" in lines[1] and "sampled by the model folder's weights" in lines[1]
    assert rpc_paths(calls)[-2:] == [RELOAD_METHOD, "/reset_prefix_cache"]
    assert "step 1: weights loaded by 1 policy server(s)" in lines[-1]


def test_a_server_holding_another_folder_fails_the_step(tmp_path):
    other = server([], loaded=[{"folder": "/elsewhere/step-000009", "fingerprint": "x"}])
    sync = FilesystemSync(trainer_at(0), [other], tmp_path, report=print, timing=lambda *a: None)
    sync.sync_weights()
    sync.trainer.state.global_step = 1
    with pytest.raises(WeightSyncError, match="something else loads its weights"):
        sync.sync_weights()


def test_a_reload_answer_without_results_is_named(tmp_path):
    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={})  # tests/vllm_standin.py answers every other route so

    odd = VllmAdmin("http://policy:8001", timeout_s=5, transport=httpx.MockTransport(handle))
    sync = FilesystemSync(trainer_at(0), [odd], tmp_path, report=print, timing=lambda *a: None)
    with pytest.raises(WeightSyncError, match=r"did not load the weights of step 0 \(200: no results list in"):
        sync.sync_weights()


def test_every_admin_call_is_bounded_explicitly():
    seen = {}

    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content or b"{}")
        seen[body.get("method", request.url.path)] = request.extensions["timeout"]
        if request.url.path == "/collective_rpc":
            return httpx.Response(200, json={"results": [None]})
        return httpx.Response(200, json={"success": True, "is_paused": False, "is_sleeping": False})

    admin = VllmAdmin("http://policy:8001", timeout_s=300, transport=httpx.MockTransport(handle))
    admin.reload_weights(tmp := __import__("pathlib").Path("/w/step-000001"))
    admin.loaded_weights()
    admin.reset_prefix_cache()
    admin.is_paused()
    admin.is_sleeping()
    assert seen[RELOAD_METHOD] == {"connect": 10.0, "read": 300.0, "write": 300.0, "pool": 300.0}
    for quick in (LOADED_METHOD, "/reset_prefix_cache", "/is_paused", "/is_sleeping"):
        assert seen[quick] == {"connect": 10.0, "read": 60.0, "write": 60.0, "pool": 60.0}, quick
    assert str(tmp) == "/w/step-000001"


def test_a_server_left_paused_by_a_dead_trainer_is_resumed_at_the_start():
    calls = []

    def handle(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        return httpx.Response(200, json={"is_paused": request.url.path == "/is_paused" and len(calls) == 1})

    lines = []
    release_held([VllmAdmin("http://policy:8001", timeout_s=5, transport=httpx.MockTransport(handle))], lines.append)
    assert calls == ["/is_paused", "/resume"] and "was paused (a trainer died mid-update): resumed it" in lines[0]


class HungNccl:
    """TRL's NCCL sync whose peer died: the broadcast never returns (here: until released)."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def sync_weights(self) -> None:
        self.release.wait(30)


def test_an_nccl_sync_that_hangs_fails_the_step_at_its_timeout():
    hung = HungNccl()
    started = time.monotonic()
    with pytest.raises(WeightSyncError, match=r"did not finish within 0.5 s .*make down && make up"):
        TimedSync(hung, lambda *a: None, timeout_s=0.5, policy="http://policy:8000").sync_weights()
    assert time.monotonic() - started < 5
    hung.release.set()


def test_an_nccl_sync_that_errors_fails_the_step_by_name():
    class Refused:
        def sync_weights(self) -> None:
            raise ConnectionError("Connection refused")

    timings = {}
    with pytest.raises(WeightSyncError, match=r"NCCL weight sync into http://policy:8000 failed \(ConnectionError"):
        TimedSync(Refused(), timings.__setitem__, timeout_s=5, policy="http://policy:8000").sync_weights()
    assert timings == {}
    TimedSync(SimpleNamespace(sync_weights=lambda: None), timings.__setitem__, timeout_s=5).sync_weights()
    assert timings["weight_sync"] >= 0
