"""The launcher app in process (create_app over LocalBackend): what it builds once, its token
dependency, its settings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from testkit.servers import free_port
from tests.launcher.test_local_backend import bundle, launch
from veri.core.launch import GroupLaunch
from veri.services.launcher.app import create_app, make_backend
from veri.services.launcher.backend import SandboxBackend
from veri.services.launcher.errors import LauncherError
from veri.services.launcher.local import LocalBackend
from veri.services.launcher.settings import LauncherSettings


class ClosingBackend(LocalBackend):
    closed = False

    def close(self) -> None:
        self.closed = True


@pytest.mark.needs("app")
def test_health_reports_the_backend_and_the_app_closes_it(tmp_path):
    backend = ClosingBackend()
    settings = LauncherSettings(backend="local", output_root=tmp_path / "out")
    with TestClient(create_app(settings, backend)) as client:
        health = client.get("/health").json()
    assert health == {"ok": True, "backend": "local", "runtime": None, "network": None,
                      "output_root": str((tmp_path / "out").absolute()), "max_parallel_rollouts": 64}
    assert backend.closed


@pytest.mark.needs("app")
def test_groups_need_the_token_when_one_is_set(tmp_path):
    group = GroupLaunch(launches=[launch(bundle(tmp_path, "ok", "print('x')\n"), "r1")])
    settings = LauncherSettings(backend="local", output_root=tmp_path / "out", token="s3cret")
    with TestClient(create_app(settings)) as client:
        body = group.model_dump_json()
        headers = {"content-type": "application/json"}
        assert client.post("/v1/groups", content=body, headers=headers).status_code == 401
        wrong = client.post("/v1/groups", content=body, headers={**headers, "Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        [result] = client.post("/v1/groups", content=body, headers={**headers, "Authorization": "Bearer s3cret"},
                               params={"subdir": "job"}).json()
    assert result["status"] == "completed"
    assert Path(result["output_dir"]) == (tmp_path / "out" / "job" / "r1").absolute()


@pytest.mark.needs("app")
def test_settings_refuse_an_unknown_backend():
    with pytest.raises(ValueError, match="backend"):
        LauncherSettings(backend="podman")


@pytest.mark.needs("app")
def test_the_local_backend_satisfies_the_protocol():
    backend: SandboxBackend = make_backend(LauncherSettings(backend="local"))
    assert (backend.name, backend.runtime) == ("local", None)
    backend.close()


@pytest.mark.needs("app")
def test_launcher_errors_are_one_family():
    from veri.services.launcher.errors import ImageProblem, SandboxUnavailable

    assert issubclass(SandboxUnavailable, LauncherError) and issubclass(ImageProblem, LauncherError)


@pytest.mark.needs("process")
def test_serve_refuses_to_start_with_one_line(tmp_path):
    """No such rollouts network (or no daemon, no runsc, no SDK here): one line with the fix, exit 1."""
    done = subprocess.run([sys.executable, "-m", "veri.cli", "serve", "launcher", "--network", "veri-no-such-net",
                           "--output-root", str(tmp_path), "--port", str(free_port())],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("veri serve launcher: ") and "Traceback" not in done.stderr
