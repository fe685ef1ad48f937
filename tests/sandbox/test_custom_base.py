"""`make base-image`: a user's harness base FROM veri/base, built offline from its vendored
requirements.txt (`make vendor-base-image`, the one online step), trusting a company's whole CA bundle
(~200 KB: more than one build argument may carry) given as EXTRA_CA."""

from __future__ import annotations

import subprocess
import textwrap
import uuid
from pathlib import Path

import docker
import pytest

from tests.sandbox.conftest import BASE, PREFIX, ROOT

pytestmark = pytest.mark.timeout(900)
OFFLINE = {"PIP_INDEX_URL": "http://127.0.0.1:9/", "PIP_NO_INDEX": "1"}  # the build itself must need no index


def ca_bundle(folder: Path, min_bytes: int = 200_000) -> tuple[Path, list[str]]:
    """A PEM bundle of self-signed CA certificates (one key, many subjects) of at least `min_bytes`."""
    key = folder / "ca-key.pem"
    subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
    pems: list[str] = []
    while sum(map(len, pems)) < min_bytes:
        done = subprocess.run(["openssl", "req", "-x509", "-new", "-key", str(key), "-days", "2", "-subj",
                               f"/O=veri test/CN=veri test CA {len(pems)}"], check=True, capture_output=True, text=True)
        pems.append(done.stdout)
    bundle = folder / "corp-ca-bundle.pem"
    bundle.write_text("".join(pems))
    return bundle, ["".join(pem.split("-----")[2].split()) for pem in pems]


def make(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(["make", "--no-print-directory", *args, f"IMAGE_PREFIX={PREFIX}"], cwd=ROOT,
                          env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=600)


@pytest.fixture
def custom_base(tmp_path, docker_client):
    folder = tmp_path / "mybase"
    folder.mkdir()
    (folder / "Dockerfile").write_text(textwrap.dedent(f"""\
        ARG BASE_IMAGE={BASE}
        FROM ${{BASE_IMAGE}}
        USER root
        COPY veri-extra-ca.pem /usr/local/share/ca-certificates/
        RUN veri-add-extra-ca
        ARG VENDOR_URL
        RUN NO_PROXY=127.0.0.1 pip install --no-cache-dir --no-index --find-links "$VENDOR_URL/wheels/" \\
              -r "$VENDOR_URL/wheels/requirements.txt"
        COPY hello.txt /work/hello.txt
        USER harness
    """))
    (folder / "requirements.txt").write_text("six==1.17.0\n")
    (folder / "hello.txt").write_text("hello\n")
    name = f"veri-test/custom-base-{uuid.uuid4().hex[:8]}"
    yield folder, name
    try:
        docker_client.images.remove(name, force=True)
    except docker.errors.ImageNotFound:
        pass


def test_custom_base_offline_with_a_200kb_ca_bundle(custom_base, tmp_path, docker_client):
    folder, name = custom_base
    dockerfile = folder / "Dockerfile"
    bundle, bodies = ca_bundle(tmp_path)
    assert bundle.stat().st_size > 131072  # past the kernel's cap on one argument (MAX_ARG_STRLEN)

    missing = make("base-image", f"NAME={name}", f"DOCKERFILE={dockerfile}", env=OFFLINE)
    if "are not vendored" not in missing.stderr:  # the first run ever on this machine
        assert missing.returncode == 0, missing.stderr[-3000:]
    else:
        assert "make vendor-base-image DOCKERFILE=" in missing.stderr
        vendored = make("vendor-base-image", f"DOCKERFILE={dockerfile}")  # the online step
        assert vendored.returncode == 0, vendored.stderr[-3000:]

    built = make("base-image", f"NAME={name}", f"DOCKERFILE={dockerfile}", f"EXTRA_CA={bundle}", env=OFFLINE)
    assert built.returncode == 0, f"{built.stdout[-3000:]}\n{built.stderr[-3000:]}"
    assert "Argument list too long" not in built.stderr
    out = docker_client.containers.run(name, ["python3", "-c", textwrap.dedent("""
        import os, six, ssl
        trusted = "".join(open("/etc/ssl/certs/ca-certificates.crt").read().split())
        print(open("/work/hello.txt").read().strip(), six.__version__,
              len(ssl.create_default_context().get_ca_certs()))
        print(sum(body in trusted for body in os.environ["CA_BODIES"].split(",")))
    """)], environment={"CA_BODIES": ",".join(bodies[:40])}, runtime="runsc", network_mode="none",
        remove=True).decode().split()
    # every one of the bundle's certificates is in the system store (checked: the first 40)
    assert out[:2] == ["hello", "1.17.0"], out
    assert int(out[-1]) == 40, out
    assert int(out[2]) >= len(bodies), out


def test_extra_ca_needs_a_dockerfile_that_copies_it(tmp_path):
    (tmp_path / "Dockerfile").write_text(f"FROM {BASE}\nUSER root\nARG EXTRA_CA_CERT=\"\"\nRUN veri-add-extra-ca\n")
    bundle, _ = ca_bundle(tmp_path, min_bytes=1)
    done = make("base-image", f"NAME=veri-test/never-{uuid.uuid4().hex[:8]}", f"DOCKERFILE={tmp_path / 'Dockerfile'}",
                f"EXTRA_CA={bundle}")
    assert done.returncode != 0
    assert "never copies veri-extra-ca.pem" in done.stderr and "COPY veri-extra-ca.pem" in done.stderr
