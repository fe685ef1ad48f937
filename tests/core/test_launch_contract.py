"""A launch request (docs/security.md) sets only the harness contract's variables, and a rollout id is one
constrained type (core/ids.py) that the launcher and the proxy both take."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from tests.launcher.test_local_backend import bundle, launch
from veri.core.harness import rollout_env
from veri.core.launch import GroupLaunch, RolloutLaunch
from veri.core.records import SessionCreate
from veri.services.launcher.app import create_app
from veri.services.launcher.settings import LauncherSettings

pytestmark = pytest.mark.needs("app")


def _launch(**kw) -> RolloutLaunch:
    return RolloutLaunch(**{"rollout_id": "r-1", "image": "veri/harness-x", "env": {}, "timeout_s": 5, **kw})


def test_the_contract_is_accepted():
    env = rollout_env(proxy_base_url="http://proxy:8000", rollout_id="r-1", api_key="k", model="m",
                      task={"prompt": "p"}, task_index=0, rollout_index=0, max_turns=4)
    assert _launch(env=env).env == env


@pytest.mark.parametrize("name", ["LD_PRELOAD", "PATH", "PYTHONPATH", "HTTP_PROXY", "HOME"])
def test_a_variable_outside_the_contract_is_refused_with_the_fix(name):
    with pytest.raises(ValidationError, match=f"{name}, outside the harness contract.*VERI_TASK"):
        _launch(env={"VERI_ROLLOUT_ID": "r-1", name: "/tmp/x"})


@pytest.mark.parametrize("rollout_id", ["r-0123456789abcdef", "svc-ok", "b8-3", "job.step_1"])
def test_rollout_ids(rollout_id):
    assert _launch(rollout_id=rollout_id).rollout_id == rollout_id
    assert SessionCreate(rollout_id=rollout_id).rollout_id == rollout_id


@pytest.mark.parametrize("rollout_id", ["", "../etc", "a/b", "-x", "a b", "x" * 129, "é"])
def test_bad_rollout_ids_are_refused_by_both(rollout_id):
    with pytest.raises(ValidationError):
        _launch(rollout_id=rollout_id)
    with pytest.raises(ValidationError):
        SessionCreate(rollout_id=rollout_id)


def test_the_launcher_answers_422_for_ld_preload(tmp_path):
    good = launch(bundle(tmp_path, "ok", "print('x')\n"), "r1")
    body = GroupLaunch(launches=[good]).model_dump(mode="json")
    body["launches"][0]["env"]["LD_PRELOAD"] = "/tmp/evil.so"
    with TestClient(create_app(LauncherSettings(backend="local", output_root=tmp_path / "out")),
                    client=("127.0.0.1", 4000)) as client:
        answer = client.post("/v1/groups", json=body)
    assert answer.status_code == 422 and "LD_PRELOAD" in answer.text
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*"))
