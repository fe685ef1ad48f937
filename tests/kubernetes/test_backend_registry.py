"""`veri harness push --registry R`: the image tagged R/<image> and pushed to a real registry (Debian's
`docker-registry`, on a loopback port dockerd treats as insecure-allowed), where the launcher's
`--registry R` pods would pull it from; registry names refused with their fix."""

from __future__ import annotations

import io
import json
import secrets
import shutil
import socket
import subprocess
import tarfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import tiers
from veri.core.egress import LABEL_EGRESS
from veri.core.registry import RegistryError, check_registry, registry_image
from veri.services.launcher.errors import ImageProblem
from veri.services.launcher.kubernetes.image_egress import ImageEgress

REPO = Path(__file__).resolve().parents[2]
VERI = str(REPO / ".venv" / "bin" / "veri")


@pytest.mark.needs("docker")
def test_registry_names() -> None:
    assert registry_image("veri/harness-url:abc", "registry.local:5000/") == "registry.local:5000/veri/harness-url:abc"
    assert registry_image("veri/harness-url:abc", None) == "veri/harness-url:abc"
    with pytest.raises(RegistryError, match="drop the scheme"):
        check_registry("https://registry.local")
    with pytest.raises(RegistryError, match="host\\[:port\\]"):
        check_registry("Registry Local")


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[str]:
    binary = shutil.which("docker-registry")
    if binary is None:
        pytest.skip("Debian's docker-registry is not installed: apt-get install docker-registry")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "registry.yml"
    config.write_text(f"version: 0.1\nlog: {{level: error}}\n"
                      f"storage: {{filesystem: {{rootdirectory: {tmp_path}/data}}}}\n"
                      f"http: {{addr: 127.0.0.1:{port}}}\n")
    process = subprocess.Popen([binary, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"http://{address}/v2/", timeout=1)
                break
            except OSError:
                assert process.poll() is None, process.stderr.read() if process.stderr else ""
                assert time.monotonic() < deadline, "docker-registry did not answer"
                time.sleep(0.1)
        yield address
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
@tiers.fixture_needs("docker")
def docker_client() -> Iterator[Any]:
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env(timeout=60)
        client.ping()
    except docker.errors.DockerException as exc:
        pytest.skip(f"no Docker daemon ({exc}): make docker")
    yield client
    client.close()


@pytest.fixture
def make_image(docker_client: Any) -> Iterator[Callable[..., str]]:
    """A one-file image `veri-test/harness-push:<random>` with the given labels; removed after."""
    made: list[str] = []

    def make(**labels: str) -> str:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            data = b"veri push test\n"
            info = tarfile.TarInfo("hello.txt")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        tag = secrets.token_hex(4)
        changes = [f"LABEL {key}={json.dumps(value)}" for key, value in labels.items()]
        docker_client.api.import_image_from_data(buffer.getvalue(), repository="veri-test/harness-push", tag=tag,
                                                 changes=changes)
        made.append(f"veri-test/harness-push:{tag}")
        return made[-1]

    yield make
    for image in made:
        for name in docker_client.images.get(image).tags:
            docker_client.images.remove(name, force=True)


def test_push_to_a_real_registry(registry: str, make_image: Callable[..., str]) -> None:
    tiny_image = make_image()
    done = subprocess.run([VERI, "harness", "push", "--registry", registry, tiny_image],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{registry}/{tiny_image}"
    repository, tag = tiny_image.split(":")
    tags = json.load(urllib.request.urlopen(f"http://{registry}/v2/{repository}/tags/list", timeout=5))
    assert tags == {"name": repository, "tags": [tag]}


@pytest.mark.needs("docker")
def test_push_refusals_name_the_fix() -> None:
    done = subprocess.run([VERI, "harness", "push", "--registry", "http://r.local", "x"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "drop the scheme" in done.stderr
    done = subprocess.run([VERI, "harness", "push", "--registry", "127.0.0.1:1", "veri-test/no-such:image"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "veri harness build BUNDLE" in done.stderr, done.stderr


def test_launcher_reads_each_images_egress_from_the_registry(registry: str, make_image: Callable[..., str]) -> None:
    """The kubernetes backend's egress per rollout: the bundle image's label, read where the nodes pull."""
    images = {
        "none": make_image(**{LABEL_EGRESS: json.dumps("none")}),
        "open": make_image(**{LABEL_EGRESS: json.dumps("open")}),
        "allowlist": make_image(**{LABEL_EGRESS: json.dumps(["pypi.org"])}),
        "unlabelled": make_image(),  # built before egress existed: open
    }
    for image in images.values():
        done = subprocess.run([VERI, "harness", "push", "--registry", registry, image],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    reader = ImageEgress(registry, fallback="none", insecure=True)
    assert {kind: reader.of(image) for kind, image in images.items()} == {
        "none": "none", "open": "web", "allowlist": "none", "unlabelled": "web"}
    with pytest.raises(ImageProblem, match="veri harness push --registry"):
        reader.of("veri-test/never-pushed:abc")
    assert ImageEgress(None, fallback="none").of(images["open"]) == "none"  # no registry: the launcher's setting
