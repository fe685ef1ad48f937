"""Fixtures for the launcher's sandbox tests: a rollouts network made the way the launcher expects
(internal, no host address on its bridge), the test harness's image, a DockerBackend."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def rollouts_network(docker_client) -> str:
    """veri-test-rollouts, kept between runs (see ensure_rollouts_network)."""
    from veri.services.launcher.docker_backend import ensure_rollouts_network

    network = ensure_rollouts_network(docker_client, "veri-test-rollouts")
    options = network.attrs.get("Options") or {}
    assert network.attrs.get("Internal") and options.get("com.docker.network.bridge.inhibit_ipv4") == "true", \
        "veri-test-rollouts exists without the launcher's options: docker network rm veri-test-rollouts"
    return network.name


@pytest.fixture(scope="session")
def harness_image(docker_client, tmp_path_factory) -> str:
    """veri/harness-sandbox-test:<hash> — tests/sandbox/launcher/harness_main.py as a bundle."""
    from veri.tools.harness.build import build_bundle_image

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
    from veri.services.launcher.docker_backend import DockerBackend

    backend = DockerBackend(network=rollouts_network, launcher_id=launcher_id, max_sandboxes=16)
    yield backend
    for container in docker_client.containers.list(all=True, filters={"label": f"veri.launcher={launcher_id}"}):
        container.remove(force=True)
    backend.close()

