"""veri carries a licence, and the licences page (docs/licences.md) names every image a make target builds, with
Claude Code's terms: a new image cannot ship without the page saying what it carries."""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path

from tests.docs.images import built_images, make_images, named

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs/licences.md"
# sha256 of https://www.apache.org/licenses/LICENSE-2.0.txt: the standard text, whole and unchanged.
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def test_the_licence_is_apache_2_0_whole_and_declared():
    assert hashlib.sha256((REPO / "LICENSE").read_bytes()).hexdigest() == APACHE_2_0_SHA256
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["license"] == "Apache-2.0"
    # An SPDX expression in `license` (PEP 639) needs setuptools 77 or newer to build.
    assert "setuptools>=77" in project["build-system"]["requires"]


def test_the_page_names_every_image_a_make_target_builds():
    images = built_images()
    assert set(make_images()) <= images and {"vllm-cpu", "vllm", "harness-<name>"} <= images, images
    text = PAGE.read_text(encoding="utf-8")
    missing = sorted(image for image in images if not named(image, text))
    assert not missing, f"docs/licences.md does not say what these images carry: {missing}"


def test_the_page_says_claude_code_is_used_under_anthropics_terms():
    text = PAGE.read_text(encoding="utf-8")
    assert "not open-source software" in text and "you accept by building `veri/base-claude-agent`" in text
    assert "https://code.claude.com/docs/en/legal-and-compliance" in text


def test_the_readme_links_the_page():
    assert "(docs/licences.md)" in (REPO / "README.md").read_text(encoding="utf-8")


def test_an_image_the_page_leaves_out_is_found():
    text = PAGE.read_text(encoding="utf-8").replace("`veri/vllm` = `veri/trainer-gpu`", "the GPU image")
    assert not named("vllm", text) and named("vllm-cpu", text)
