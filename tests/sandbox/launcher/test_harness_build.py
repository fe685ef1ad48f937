"""`veri harness build`: image tagged by content hash, a rebuild is a no-op, deps installed at build
time offline from vendored wheels (or not needed when the base has them), errors that say what to do."""

from __future__ import annotations

import subprocess
import sys
import uuid
import zipfile
from pathlib import Path

import pytest

from tests.sandbox.conftest import BASE, ROOT
from veri.tools.harness.build import BuildError, build_bundle_image, pip_vendor_dir


@pytest.fixture
def built(docker_client):
    tags: list[str] = []
    yield tags
    for tag in tags:
        try:
            docker_client.images.remove(tag, force=True)
        except Exception:  # noqa: BLE001 - shared layers or already gone
            pass


def bundle(tmp_path: Path, files: dict[str, str], deps: str = "", base: str = BASE) -> Path:
    folder = tmp_path / "bundle"
    folder.mkdir(exist_ok=True)
    name = f"test_{uuid.uuid4().hex[:8]}"
    (folder / "veri-harness.toml").write_text(f'name = "{name}"\nentrypoint = ["python", "agent.py"]\n'
                                              f'base_image = "{base}"\n{deps}')
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return folder


def run(docker_client, tag: str, command: list[str] | None = None) -> str:
    return docker_client.containers.run(tag, command, runtime="runsc", network_mode="none", remove=True,
                                        read_only=True, user="1000:1000").decode()


def test_tag_is_the_content_hash_and_a_rebuild_is_a_no_op(docker_client, built, tmp_path):
    folder = bundle(tmp_path, {"agent.py": "import os, helper\nprint(helper.X, os.getcwd())\n",
                               "helper.py": "X = 'one'\n"})
    messages: list[str] = []
    tag = build_bundle_image(folder, docker_client, vendor_root=tmp_path / "vendor", download=False,
                             log=messages.append)
    built.append(tag)
    repo, digest = tag.split(":")
    assert repo.startswith("veri/harness-test_") and len(digest) == 16
    image = docker_client.images.get(tag)
    assert image.attrs["Config"]["Cmd"] == ["python", "agent.py"]
    assert image.labels["org.veri.bundle-hash"].startswith(digest)
    assert run(docker_client, tag) == "one /harness\n"
    # The bundle is root's: readable and runnable by the harness user, not writable.
    perms = run(docker_client, tag, ["sh", "-c", "stat -c '%U %a' /harness /harness/agent.py /veri/output; "
                                           "touch /harness/x 2>/dev/null || echo read-only"])
    assert perms.split("\n")[:4] == ["root 755", "root 644", "harness 755", "read-only"], perms

    messages.clear()
    assert build_bundle_image(folder, docker_client, vendor_root=tmp_path / "vendor", download=False,
                              log=messages.append) == tag
    assert messages == [f"{tag} is up to date"]
    assert docker_client.images.get(tag).id == image.id

    (folder / "helper.py").write_text("X = 'two'\n")
    changed = build_bundle_image(folder, docker_client, vendor_root=tmp_path / "vendor", download=False,
                                 log=messages.append)
    built.append(changed)
    assert changed != tag and changed.split(":")[0] == repo
    assert run(docker_client, changed) == "two /harness\n"


def _wheel(folder: Path, name: str = "veritestpkg", version: str = "0.1") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as z:
        z.writestr(f"{name}/__init__.py", "VALUE = 42\n")
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", f"{name}/__init__.py,,\n{info}/METADATA,,\n{info}/WHEEL,,\n{info}/RECORD,,\n")


def test_requirements_installed_at_build_time_from_vendored_wheels(docker_client, built, tmp_path):
    folder = bundle(tmp_path, {"agent.py": "import veritestpkg, openai\nprint(veritestpkg.VALUE)\n",
                               "requirements.txt": "veritestpkg==0.1\nopenai\n"},
                    deps='[deps]\nrequirements = "requirements.txt"\n')
    vendor = tmp_path / "vendor"
    with pytest.raises(BuildError, match="(?s)No matching distribution.*fix: .*run veri harness build once online"):
        build_bundle_image(folder, docker_client, vendor_root=vendor, download=False)

    wheels = pip_vendor_dir(folder / "requirements.txt", vendor)
    _wheel(wheels)
    (wheels / ".complete").write_text("test\n")
    tag = build_bundle_image(folder, docker_client, vendor_root=vendor, download=False)
    built.append(tag)
    assert run(docker_client, tag) == "42\n"
    # No wheels were left in the image.
    assert run(docker_client, tag, ["sh", "-c", "ls /tmp/veri-wheels 2>&1 | head -1"]).startswith("ls: cannot")


def test_demo_bundle_builds_offline_from_what_its_base_has(docker_client, built, tmp_path):
    """url_extract_openai's requirements (openai, httpx) are veri/base's own: no wheels needed."""
    demo = ROOT / "harness-bundles" / "url_extract_openai"
    assert demo.is_dir(), f"the demo bundle moved: {demo} is gone (update this test and config/url_extract_*.yaml)"
    tag = build_bundle_image(demo, docker_client, vendor_root=tmp_path / "vendor", download=False)
    assert tag.startswith("veri/harness-url_extract_openai:")


def test_missing_base_image_names_the_fix(docker_client, tmp_path):
    folder = bundle(tmp_path, {"agent.py": ""}, base="veri/no-such-base")
    with pytest.raises(BuildError, match="(?s)base_image = 'veri/no-such-base'.*make images"):
        build_bundle_image(folder, docker_client, download=False)


def test_cli_prints_the_tag(docker_client, built, tmp_path):
    folder = bundle(tmp_path, {"agent.py": "print('cli')\n"})
    result = subprocess.run([sys.executable, "-m", "veri.cli", "harness", "build", str(folder), "--offline",
                             "--vendor", str(tmp_path / "vendor")], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    tag = result.stdout.strip()
    built.append(tag)
    assert run(docker_client, tag) == "cli\n"
