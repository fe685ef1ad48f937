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
from collections.abc import Iterator
from pathlib import Path

import pytest

from veri.core.registry import RegistryError, check_registry, registry_image

REPO = Path(__file__).resolve().parents[2]
VERI = str(REPO / ".venv" / "bin" / "veri")


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
def tiny_image() -> Iterator[str]:
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env(timeout=60)
        client.ping()
    except docker.errors.DockerException as exc:
        pytest.skip(f"no Docker daemon ({exc}): make docker")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        data = b"veri push test\n"
        info = tarfile.TarInfo("hello.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    tag = secrets.token_hex(4)
    image = f"veri-test/harness-push:{tag}"
    client.api.import_image_from_data(buffer.getvalue(), repository="veri-test/harness-push", tag=tag)
    try:
        yield image
    finally:
        for name in [image, *(t for t in client.images.get(image).tags if t != image)]:
            client.images.remove(name, force=True)
        client.close()


def test_push_to_a_real_registry(registry: str, tiny_image: str) -> None:
    done = subprocess.run([VERI, "harness", "push", "--registry", registry, tiny_image],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{registry}/{tiny_image}"
    repository, tag = tiny_image.split(":")
    tags = json.load(urllib.request.urlopen(f"http://{registry}/v2/{repository}/tags/list", timeout=5))
    assert tags == {"name": repository, "tags": [tag]}


def test_push_refusals_name_the_fix() -> None:
    done = subprocess.run([VERI, "harness", "push", "--registry", "http://r.local", "x"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "drop the scheme" in done.stderr
    done = subprocess.run([VERI, "harness", "push", "--registry", "127.0.0.1:1", "veri-test/no-such:image"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "veri harness build BUNDLE" in done.stderr, done.stderr
