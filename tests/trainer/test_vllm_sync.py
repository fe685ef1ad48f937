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


def server(calls: list, answer=None, *, reset: bool = True, fail: Exception | None = None) -> VllmAdmin:
    def handle(request: httpx.Request) -> httpx.Response:
        if fail is not None:
            raise fail
        body = json.loads(request.content or b"{}")
        calls.append((request.url.path, body))
        if request.url.path == "/collective_rpc":
            folder = body["args"][0]
            return httpx.Response(200, json={"results": answer or [{"folder": folder, "retied": []}]})
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
