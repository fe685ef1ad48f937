"""Bundle manifests: an invalid one is an error that names the field and the fix; the content hash
covers every file (no docker needed here; tests/sandbox/test_harness_build.py builds images)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from veri.core.harness import ManifestError, load_manifest
from veri.tools.harness.build import bundle_entries, content_hash, dockerfile, image_repository

ROOT = Path(__file__).resolve().parents[2]
AGENT = 'name = "x"\nentrypoint = ["python", "agent.py"]\n'


def make(tmp_path: Path, manifest: str, files: dict[str, str] | None = None) -> Path:
    folder = tmp_path / "b"
    folder.mkdir(exist_ok=True)
    (folder / "veri-harness.toml").write_text(manifest)
    for name, text in (files or {"agent.py": "print(1)\n"}).items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


@pytest.mark.parametrize("manifest, field, hint", [
    ('name = "x"\n', "entrypoint", 'entrypoint = ["python", "agent.py"]'),
    ('name = "Bad Name"\nentrypoint = ["python", "agent.py"]\n', "name", "lowercase"),
    ('name = "x"\nentrypoint = []\n', "entrypoint", "the command run from /harness"),
    ('name = "x"\nentrypoint = ["python", "agent.py"]\nprotocol = "grpc"\n', "protocol", '"openai" or "anthropic"'),
    ('name = "x"\nentrypoint = ["python", "agent.py"]\nentry_point = "y"\n', "entry_point", "remove it; known fields"),
    (f'{AGENT}[deps]\nnpm = "left-pad"\n', "deps.npm", "a list of npm packages"),
    (f'{AGENT}[deps]\npip = ["a"]\n', "deps.pip", "known fields: requirements, npm"),
])
def test_invalid_manifest_names_the_field_and_the_fix(tmp_path, manifest, field, hint):
    with pytest.raises(ManifestError) as error:
        load_manifest(make(tmp_path, manifest))
    message = str(error.value)
    assert f"  {field}:" in message and "fix:" in message and hint in message, message


def test_files_the_manifest_names_must_exist(tmp_path):
    with pytest.raises(ManifestError, match="entrypoint names 'main.py'.*\n.*fix:"):
        load_manifest(make(tmp_path, 'name = "x"\nentrypoint = ["python", "main.py"]\n'))
    with pytest.raises(ManifestError, match="deps.requirements = 'req.txt' does not exist"):
        load_manifest(make(tmp_path, 'name = "x"\nentrypoint = "python agent.py"\n[deps]\nrequirements = "req.txt"\n'))
    with pytest.raises(ManifestError, match="no veri-harness.toml"):
        load_manifest(tmp_path)
    with pytest.raises(ManifestError, match="not valid TOML"):
        load_manifest(make(tmp_path, 'name = "x\n'))


@pytest.mark.needs("process")
def test_cli_reports_an_invalid_manifest_without_docker(tmp_path):
    folder = make(tmp_path, 'name = "x"\nentrypoint = ["python", "agent.py"]\nbase = "veri/base"\n')
    result = subprocess.run([sys.executable, "-m", "veri.cli", "harness", "build", str(folder)],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "base:" in result.stderr and "fix: remove it" in result.stderr, result.stderr


@pytest.mark.parametrize("name", [
    "url_extract_openai", "url_extract_claude", "url_extract_codex", "url_extract_inline"])
def test_demo_bundles_are_valid(name):
    # A moved or renamed bundle fails here: load_manifest raises on a missing folder.
    assert load_manifest(ROOT / "harness-bundles" / name).name == name


def test_content_hash_covers_every_file_and_the_base(tmp_path):
    folder = make(tmp_path, 'name = "x"\nentrypoint = ["python", "agent.py"]\n',
                  {"agent.py": "print(1)\n", "lib/util.py": "X = 1\n"})
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "agent.cpython-311.pyc").write_bytes(b"junk")
    first = content_hash(bundle_entries(folder), "sha256:base1")
    assert first == content_hash(bundle_entries(folder), "sha256:base1")
    assert "__pycache__" not in {e.rel.split("/")[0] for e in bundle_entries(folder)}
    assert first != content_hash(bundle_entries(folder), "sha256:base2")
    (folder / "lib" / "util.py").write_text("X = 2\n")
    second = content_hash(bundle_entries(folder), "sha256:base1")
    assert second != first
    (folder / "lib" / "util.py").chmod(0o755)
    assert content_hash(bundle_entries(folder), "sha256:base1") != second


def test_image_names_and_dockerfile(tmp_path):
    manifest = load_manifest(make(tmp_path, 'name = "url_extract__x..y-"\nentrypoint = ["python", "agent.py"]\n'
                                           '[deps]\nrequirements = "agent.py"\n'))
    assert image_repository(manifest) == "veri/harness-url_extract__x-y"
    text = dockerfile(manifest, {"Entrypoint": ["/usr/bin/tini", "--"]}, has_wheels=True)
    assert "--no-index --find-links /tmp/veri-wheels" in text and "ENTRYPOINT" not in text
    assert text.rstrip().endswith('CMD ["python", "agent.py"]') and "COPY bundle /harness" in text
    assert "ENTRYPOINT []" in dockerfile(manifest, {"Entrypoint": ["python3"]}, has_wheels=False)


@pytest.mark.parametrize("egress, hint", [
    ('"closed"', '"none" (only the capture proxy)'),
    ("[]", 'write egress = "none"'),
    ('["https://pypi.org/simple"]', "is a URL: name the host alone"),
    ('["pypi.org:99999"]', "the port must be 1-65535"),
    ('["bad host"]', "not a host name or host:port"),
    ("3", "a string or a list of hosts"),
])
def test_invalid_egress_names_the_fix(tmp_path, egress, hint):
    with pytest.raises(ManifestError) as error:
        load_manifest(make(tmp_path, f"{AGENT}egress = {egress}\n"))
    message = str(error.value)
    assert "  egress:" in message and hint in message and "fix:" in message, message


def test_egress_values(tmp_path):
    assert load_manifest(make(tmp_path, AGENT)).egress == "open"
    assert load_manifest(make(tmp_path, f'{AGENT}egress = "none"\n')).egress == "none"
    listed = load_manifest(make(tmp_path, f'{AGENT}egress = ["PyPI.org", "*.example.com", "api.x.io:443"]\n'))
    assert listed.egress == ["*.example.com", "api.x.io:443", "pypi.org"]
