"""The verifier's /veri/tools tree is made from what `veri tasks vendor` left: uv and uvx out of PyPI's
musllinux wheel, the test.sh wheels, the shims; the variables put the shims first and uv offline."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from veri.tools.tasks.verifier_tools import VerifierToolsError, verifier_env, verifier_tools


def vendored(tmp_path: Path) -> Path:
    vendor = tmp_path / "vendor"
    (vendor / "verifier" / "uv").mkdir(parents=True)
    (vendor / "verifier" / "wheels").mkdir()
    (vendor / "verifier" / "wheels" / "pytest-8.4.1-py3-none-any.whl").write_bytes(b"wheel")
    with zipfile.ZipFile(vendor / "verifier" / "uv" / "uv-0.13.9-py3-none-musllinux_1_1_x86_64.whl", "w") as wheel:
        wheel.writestr("uv-0.13.9.data/scripts/uv", b"uv binary")
        wheel.writestr("uv-0.13.9.data/scripts/uvx", b"uvx binary")
        wheel.writestr("uv/__init__.py", b"")
    return vendor


def test_the_tree_holds_uv_the_wheels_and_the_shims(tmp_path: Path):
    vendor = vendored(tmp_path)
    tree = verifier_tools(vendor, build_dir=tmp_path / "build")
    assert (tree / "bin" / "uv").read_bytes() == b"uv binary" and (tree / "bin" / "uvx").stat().st_mode & 0o111
    assert [p.name for p in (tree / "wheels").iterdir()] == ["pytest-8.4.1-py3-none-any.whl"]
    assert sorted(p.name for p in (tree / "shims").iterdir()) == ["apt-get", "curl", "wget"]
    assert "/veri/tools/bin/uv" in (tree / "uv-install.sh").read_text()
    assert verifier_tools(vendor, build_dir=tmp_path / "build") == tree  # the same inputs: reused


def test_without_the_uv_wheel_the_fix_is_named(tmp_path: Path):
    with pytest.raises(VerifierToolsError, match="veri tasks vendor"):
        verifier_tools(tmp_path, build_dir=tmp_path / "build")


def test_the_variables_put_the_shims_first_and_uv_offline_on_veris_python():
    env = verifier_env("/usr/bin:/bin", scratch="/veri/verify")
    assert env["PATH"] == "/veri/tools/shims:/veri/tools/bin:/usr/bin:/bin"
    assert env["UV_OFFLINE"] == "1" and env["UV_NO_CONFIG"] == "1" and env["PIP_NO_INDEX"] == "1"
    assert env["UV_PYTHON"] == "/veri/rt/bin/python3" and env["UV_PYTHON_DOWNLOADS"] == "never"
    assert env["HOME"].startswith("/veri/verify/") and env["UV_CACHE_DIR"].startswith("/veri/verify/")
