"""The build proxy answers apt and pip from vendor/tasks/ and names everything else as not vendored."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import pytest

from veri.tools.tasks.build_proxy import BuildProxy


@pytest.fixture
def vendor(tmp_path: Path) -> Path:
    release = tmp_path / "apt/deb.debian.org/debian/dists/bookworm/InRelease"
    release.parent.mkdir(parents=True)
    release.write_bytes(b"signed index")
    (tmp_path / "secret").write_bytes(b"not served")
    (tmp_path / "debs").mkdir()
    (tmp_path / "debs/cpp_4_12.2.0-3_amd64.deb").write_bytes(b"cpp deb")
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels/Requests-2.32.3-py3-none-any.whl").write_bytes(b"wheel")
    return tmp_path


def fetch(proxy: BuildProxy, url: str) -> tuple[int, bytes]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy.url}))
    try:
        with opener.open(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""


def test_apt_and_pip_are_answered_from_the_vendored_folders(vendor: Path):
    with BuildProxy(vendor) as proxy:
        assert fetch(proxy, "http://deb.debian.org/debian/dists/bookworm/InRelease") == (200, b"signed index")
        # the pool's name has no epoch; vendor-debs.sh keeps it as _4_
        assert fetch(proxy, "http://deb.debian.org/debian/pool/main/g/gcc-defaults/cpp_12.2.0-3_amd64.deb") == \
            (200, b"cpp deb")
        status, index = fetch(proxy, "http://pypi.veri.internal/simple/requests/")
        assert status == 200 and b'href="/files/Requests-2.32.3-py3-none-any.whl#sha256=' in index
        assert fetch(proxy, "http://pypi.veri.internal/files/Requests-2.32.3-py3-none-any.whl") == (200, b"wheel")
        assert proxy.answers.missing == []


def test_everything_else_is_a_404_that_is_named(vendor: Path):
    with BuildProxy(vendor) as proxy:
        assert fetch(proxy, "http://deb.debian.org/debian/pool/main/j/jq/jq_1.6-2.1_amd64.deb")[0] == 404
        assert fetch(proxy, "http://deb.debian.org/../secret")[0] == 404
        assert fetch(proxy, "http://pypi.veri.internal/simple/numpy/")[0] == 404
        assert fetch(proxy, "http://example.com/")[0] == 404
        assert proxy.answers.served == []
        assert "http://pypi.veri.internal/simple/numpy/" in proxy.answers.missing
        assert len(proxy.answers.missing) == 4
