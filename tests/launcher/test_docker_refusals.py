"""DockerBackend refuses to start where it cannot sandbox, naming the fix (a fake daemon: no docker needed)."""

from __future__ import annotations

import docker
import pytest

from veri.services.launcher.docker_backend import DockerBackend, SandboxUnavailable


class FakeNetwork:
    attrs = {"Driver": "bridge", "Options": {"com.docker.network.bridge.inhibit_ipv4": "true"}}


class FakeNetworks:
    def __init__(self, names):
        self.names = names

    def get(self, name):
        if name not in self.names:
            raise docker.errors.NotFound("no such network")
        return FakeNetwork()


class FakeClient:
    def __init__(self, runtimes, networks=("veri-rollouts",)):
        self.runtimes = runtimes
        self.networks = FakeNetworks(networks)

    def info(self):
        return {"Runtimes": {name: {} for name in self.runtimes}}

    def close(self):
        pass


def test_no_runsc_is_refused_with_the_fix():
    with pytest.raises(SandboxUnavailable, match="(?s)no runsc.*make docker.*unsafe_runc"):
        DockerBackend(client=FakeClient(["runc"]), host_paths={})


def test_unsafe_runc_is_explicit():
    assert DockerBackend(client=FakeClient(["runc"]), unsafe_runc=True, host_paths={}).runtime == "runc"
    assert DockerBackend(client=FakeClient(["runc", "runsc"]), host_paths={}).runtime == "runsc"
    assert DockerBackend(client=FakeClient(["runc", "runsc"]), unsafe_runc=True, host_paths={}).runtime == "runc"


def test_missing_network_is_refused_with_the_fix():
    refused = "(?s)'veri-rollouts' does not exist.*docker network create --internal"
    with pytest.raises(SandboxUnavailable, match=refused):
        DockerBackend(client=FakeClient(["runsc"], networks=()), host_paths={})


def test_host_paths_translate_bind_mounts(tmp_path):
    from pathlib import Path

    backend = DockerBackend(client=FakeClient(["runsc"]), host_paths={"/state": "/srv/veri/state"})
    assert backend._host_path(Path("/state/outputs/r1")) == "/srv/veri/state/outputs/r1"
    assert backend._host_path(Path("/elsewhere/r1")) == "/elsewhere/r1"
