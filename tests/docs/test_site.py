"""The docs site builds with `mkdocs build --strict` and no network: a broken link or anchor, a page
left out of the nav or a warning of any kind fails; the built pages fetch nothing from the internet;
the home page is the README."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.docs.mkdocs_hooks import home_page, unescape_table_code

REPO = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).parent / "mkdocs"
# An asset the browser loads by itself: a script, a stylesheet, a font, an image, an iframe.
REMOTE_ASSET = re.compile(r"<(?:script|link|img|iframe)\b[^>]*(?:src|href)=\"(?:https?:)?//", re.IGNORECASE)


def _offline(command: list[str]) -> list[str]:
    """No network at all where this box allows it (root: a fresh network namespace, with no interface up)."""
    isolate = ["unshare", "--net"]
    if shutil.which("unshare") and subprocess.run([*isolate, "true"], capture_output=True).returncode == 0:
        return [*isolate, *command]
    return command


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    build = subprocess.run(_offline([str(MKDOCS), "build", "--strict", "--site-dir", str(out)]), cwd=REPO,
                           capture_output=True, text=True, timeout=300,
                           env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert build.returncode == 0, f"mkdocs build --strict failed:\n{build.stderr[-4000:]}"
    assert "WARNING" not in build.stderr, build.stderr
    return out


@pytest.mark.needs("process")
def test_the_site_builds_strict_and_offline(site: Path):
    for page in ("index.html", "getting-started.html", "reference/config.html", "reference/cli.html",
                 "reference/rules.html", "architecture.html", "benchmarks.html"):
        assert (site / page).is_file(), page


@pytest.mark.needs("process")
def test_a_page_reads_nothing_from_the_internet(site: Path):
    assert REMOTE_ASSET.search('<link rel="stylesheet" href="https://fonts.example/css">')  # what it looks for
    pages = sorted(site.rglob("*.html"))
    assert len(pages) >= 7, pages
    for page in pages:
        found = REMOTE_ASSET.search(page.read_text(encoding="utf-8"))
        assert found is None, f"{page.relative_to(site)} loads {found.group(0)!r}: the site is read air-gapped too"


@pytest.mark.needs("process")
def test_the_home_page_is_the_readme_with_site_links(site: Path):
    home = (site / "index.html").read_text(encoding="utf-8")
    assert "Harness-in-the-loop RL on your own box" in home
    assert 'href="getting-started.html"' in home and 'href="docs/' not in home


def test_home_page_links_and_table_pipes():
    assert home_page("see [GPUs](docs/gpu.md#layout) and [x](https://e.test/docs/a)") == \
        "see [GPUs](gpu.md#layout) and [x](https://e.test/docs/a)"
    assert unescape_table_code("| `a \\| b` | c \\| d |\ntext `x \\| y`") == "| `a | b` | c \\| d |\ntext `x \\| y`"


@pytest.mark.needs("process")
def test_a_broken_link_fails_the_build(tmp_path: Path):
    """The check above can fail: the same build of a copy of the docs with one dead link does."""
    shutil.copytree(REPO / "docs", tmp_path / "docs")
    shutil.copy(REPO / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copy(REPO / "README.md", tmp_path / "README.md")
    config = (tmp_path / "mkdocs.yml").read_text().replace("scripts/docs/mkdocs_hooks.py",
                                                            str(REPO / "scripts/docs/mkdocs_hooks.py"))
    (tmp_path / "mkdocs.yml").write_text(config)
    with (tmp_path / "docs/console.md").open("a") as page:
        page.write("\nSee [the missing page](no-such-page.md).\n")
    build = subprocess.run([str(MKDOCS), "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert build.returncode != 0 and "no-such-page.md" in build.stderr
