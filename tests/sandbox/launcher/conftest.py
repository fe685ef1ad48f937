"""Fixtures for the launcher's sandbox tests: a rollouts network made the way the launcher expects
(internal, no host address on its bridge), the test harness's image, a DockerBackend."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sandbox.conftest import LABEL

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def rollouts_network(docker_client) -> Iterator[str]:
    from veri.launcher.docker_backend import rollouts_network_options

    name = f"veri-test-rollouts-{uuid.uuid4().hex[:8]}"
    network = docker_client.networks.create(name, labels={LABEL: "1"}, **rollouts_network_options())
    yield name
    network.reload()
    for container in network.containers:
        container.remove(force=True)
    network.remove()


@pytest.fixture(scope="session")
def harness_image(docker_client, tmp_path_factory) -> str:
    """veri/harness-sandbox-test:<hash> — tests/sandbox/launcher/harness_main.py as a bundle."""
    from veri.harness.build import build_bundle_image

    bundle = tmp_path_factory.mktemp("bundle") / "sandbox_test"
    bundle.mkdir()
    (bundle / "veri-harness.toml").write_text('name = "sandbox_test"\nentrypoint = ["python", "main.py"]\n')
    shutil.copy(HERE / "harness_main.py", bundle / "main.py")
    return build_bundle_image(bundle, docker_client, vendor_root=tmp_path_factory.mktemp("vendor"), download=False)


@pytest.fixture(scope="session")
def launcher_id() -> str:
    return f"test-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def backend(docker_client, rollouts_network, launcher_id):
    from veri.launcher.docker_backend import DockerBackend

    backend = DockerBackend(network=rollouts_network, launcher_id=launcher_id, max_sandboxes=16)
    yield backend
    for container in docker_client.containers.list(all=True, filters={"label": f"veri.launcher={launcher_id}"}):
        container.remove(force=True)
    backend.close()

