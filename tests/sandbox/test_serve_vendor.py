"""`make images` serves the vendored wheels and tarballs to the builds on 127.0.0.1 instead of COPYing
them: the images hold what was installed, never a second copy of the wheels or of the venv."""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from tests.sandbox.conftest import BASE, CLAUDE_AGENT, CODEX_AGENT, ROOT, RUNTIME

SERVE = ROOT / "scripts/docker/serve-vendor.py"


@pytest.fixture
def served(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl").write_bytes(b"wheel")
    (tmp_path / "secret.txt").write_text("not served")
    server = subprocess.Popen([sys.executable, str(SERVE), f"wheels={wheels}"], stdout=subprocess.PIPE, text=True)
    try:
        yield f"http://127.0.0.1:{server.stdout.readline().strip()}"
    finally:
        server.kill()
        server.wait()


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""


def test_serves_the_named_folders_only(served):
    status, listing = get(f"{served}/wheels/")
    assert status == 200 and b'href="torch-2.13.0%2Bcpu-cp311-cp311-linux_x86_64.whl"' in listing
    assert get(f"{served}/wheels/torch-2.13.0%2Bcpu-cp311-cp311-linux_x86_64.whl") == (200, b"wheel")
    for outside in ("/secret.txt", "/wheels/../secret.txt", "/wheels/%2e%2e/secret.txt", "/other/x", "/"):
        assert get(served + outside)[0] == 404, outside


def test_refuses_a_missing_folder(tmp_path):
    result = subprocess.run([sys.executable, str(SERVE), f"wheels={tmp_path / 'nope'}"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and "NAME=DIR" in result.stderr


@pytest.mark.parametrize("image", [BASE, CLAUDE_AGENT, CODEX_AGENT, RUNTIME])
def test_images_hold_no_copy_of_the_vendored_files(docker_client, image):
    history = docker_client.images.get(image).history()
    copies = [layer["CreatedBy"] for layer in history
              if "COPY" in layer["CreatedBy"] and layer["Size"] > 5_000_000]
    assert not copies, f"{image} has large COPY layers (vendored files or a multi-stage venv): {copies}"
    no_wheels = docker_client.containers.run(image, ["sh", "-c", "test ! -e /wheels && test ! -e /npm && echo clean"],
                                             remove=True, user="root")
    assert no_wheels.strip() == b"clean"
