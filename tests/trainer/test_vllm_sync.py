"""The `filesystem` weight sync into vLLM servers (trainer/weights/vllm_sync.py), against vLLM's routes as
an httpx MockTransport answers them; the real servers: tests/stack/test_train_vllm.py."""

from __future__ import annotations

import json
from types import SimpleNamespace

import httpx
import pytest
import torch

from veri.trainer.errors import WeightSyncError
from veri.trainer.weights.vllm_admin import RELOAD_METHOD, VllmAdmin
from veri.trainer.weights.vllm_sync import FilesystemSync


def trainer_at(step: int) -> SimpleNamespace:
    return SimpleNamespace(model=torch.nn.Linear(2, 2), state=SimpleNamespace(global_step=step))


def server(calls: list, answer=None, *, reset: bool = True, fail: Exception | None = None,
           stays_asleep: bool = False) -> VllmAdmin:
    asleep: set[str] = set()  # vLLM's sleeping tags

    def handle(request: httpx.Request) -> httpx.Response:
        if fail is not None:
            raise fail
        body = json.loads(request.content or b"{}")
        path = request.url.path
        calls.append((path, body) if path != "/wake_up" else (path, request.url.params.get("tags")))
        if path == "/collective_rpc":
            folder = body["args"][0]
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

    return VllmAdmin("http://policy:8001", timeout_s=5, transport=httpx.MockTransport(handle))


def test_each_server_loads_the_step_folder_and_drops_its_prefix_cache(tmp_path):
    calls_a, calls_b, timings, lines = [], [], {}, []
    sync = FilesystemSync(trainer_at(0), [server(calls_a), server(calls_b)], tmp_path, report=lines.append,
                          timing=timings.__setitem__)
    sync.sync_weights()
    sync.trainer.state.global_step = 1
    sync.sync_weights()
    for calls in (calls_a, calls_b):
        assert [path for path, _ in calls] == ["/collective_rpc", "/reset_prefix_cache"] * 2
        rpc = calls[2][1]
        assert rpc["method"] == RELOAD_METHOD and rpc["args"] == [str(tmp_path / "step-000001")]
    assert [p.name for p in tmp_path.iterdir()] == ["step-000001"]  # step 0's files went once loaded
    assert (tmp_path / "step-000001" / "model.safetensors").is_file()
    assert timings["weight_sync"] > 0 and "step 1: weights loaded by 2 policy server(s)" in lines[-1]


def test_a_server_that_does_not_answer_fails_the_step_by_name(tmp_path):
    hung = server([], fail=httpx.ReadTimeout("timed out"))
    sync = FilesystemSync(trainer_at(3), [hung], tmp_path, report=print, timing=lambda *a: None)
    with pytest.raises(WeightSyncError, match=r"http://policy:8001 did not load the weights of step 3 within 5 s"):
        sync.sync_weights()


def test_a_server_without_veris_worker_extension_is_named(tmp_path):
    plain = server([], answer=[None])  # vLLM's own reload answers nothing
    sync = FilesystemSync(trainer_at(0), [plain], tmp_path, report=print, timing=lambda *a: None)
    with pytest.raises(WeightSyncError, match="--worker-extension-cls veri.policy.vllm.worker.WeightReloadExtension"):
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
    paths = [(path, detail if path == "/wake_up" else None) for path, detail in calls]
    # The trainer's CUDA cache is emptied before vLLM wakes its weights, so the KV cache fits again.
    one_sync = [("empty_cache", None), ("/wake_up", "weights"), ("/collective_rpc", None), ("/wake_up", "kv_cache"),
                ("/is_sleeping", None), ("/reset_prefix_cache", None)]
    assert paths == [*one_sync, ("/sleep", None), *one_sync, ("/wake_up", None)]
    assert timings["policy_sleep"] >= 0 and timings["weight_sync"] > 0


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
