"""The hf weight sync's version bookkeeping, against a stand-in for the policy server's admin routes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from veri.core.policy_api import ServerProcess
from veri.services.trainer.weights.served import ServedWeights
from veri.services.trainer.weights.sync import HfWeightSync, PolicyVersions, WeightSyncError


class FakeAdmin:
    """Versions like the hf server: the version the trainer names, else the next one."""

    base_url = "http://policy:8000"

    def __init__(self, version: int = 0) -> None:
        self.version = version
        self.paths: list[str] = []
        self.process = ServerProcess.new()

    def server_process(self) -> ServerProcess:
        return self.process

    def policy_version(self) -> int:
        return self.version

    def update_weights(self, path, version=None) -> int:
        assert (path / "model.safetensors").is_file()
        self.paths.append(path.name)
        self.version = self.version + 1 if version is None else version
        return self.version


def sync(admin: FakeAdmin, tmp_path, versions: PolicyVersions, lines: list[str]) -> HfWeightSync:
    served = ServedWeights([admin], lambda: [], report=lines.append)
    return HfWeightSync(admin, tmp_path, versions, served, report=lines.append, timing=lambda name, seconds: None)


def test_fresh_job_on_a_fresh_server_pushes_after_every_step(tmp_path):
    admin, versions, lines = FakeAdmin(), PolicyVersions(), []
    callback, model = sync(admin, tmp_path, versions, lines), torch.nn.Linear(2, 2)
    callback.on_train_begin(None, SimpleNamespace(global_step=0), None, model=model)
    assert admin.paths == [] and versions.expected(0) == 0
    for step in (1, 2):
        callback.on_step_end(None, SimpleNamespace(global_step=step), None, model=model)
    assert admin.paths == ["step-000001", "step-000002"] and admin.version == 2
    assert [p.name for p in tmp_path.iterdir()] == ["step-000002"]  # older weights are removed


@pytest.mark.parametrize(("served", "step"), [(4, 0), (0, 3), (3, 3)])
def test_a_server_out_of_step_gets_the_weights_as_the_jobs_step(tmp_path, served, step):
    """A resumed job (or a reused server): the checkpoint's weights go in as version = step."""
    admin, versions, lines = FakeAdmin(served), PolicyVersions(), []
    callback, model = sync(admin, tmp_path, versions, lines), torch.nn.Linear(2, 2)
    callback.on_train_begin(None, SimpleNamespace(global_step=step), None, model=model)
    assert admin.paths == [f"step-{step:06d}"] and versions.offset == 0 and admin.version == step
    assert f"weights as version {step}" in lines[0]
    callback.on_step_end(None, SimpleNamespace(global_step=step + 1), None, model=model)
    assert admin.version == versions.expected(step + 1)


def test_an_update_someone_else_made_stops_the_job(tmp_path):
    admin, versions = FakeAdmin(), PolicyVersions()
    callback, model = sync(admin, tmp_path, versions, []), torch.nn.Linear(2, 2)
    callback.on_train_begin(None, SimpleNamespace(global_step=0), None, model=model)
    admin.version = 7
    with pytest.raises(WeightSyncError, match="at version 7 after step 0, expected 0"):
        callback.on_step_end(None, SimpleNamespace(global_step=1), None, model=model)
