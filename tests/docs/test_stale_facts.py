"""Facts the docs state that the tree can check: a named file that no longer exists (a module that became a
package), an image list that lost an image, a count of tests restated away from the page that measures it.
Each went stale once; these fail when one does again."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.docs.images import make_images

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), REPO / "base-images/README.md",
         REPO / "harness-bundles/README.md"]
TOP_FOLDERS = sorted(p.name for p in REPO.iterdir() if p.is_dir() and not p.name.startswith(".")
                     and p.name not in {"build", "vendor", "tmp"})
SERVICES = sorted(p.name for p in (REPO / "services/veri").iterdir() if p.is_dir() and not p.name.startswith("_"))
# A path the docs name: from a folder of the repository (`services/veri/...`, `scripts/...`) or, as the docs
# write them, from a service's package (`core/episodes.py`, `policy/hf/`).
FOLDERS = "|".join(map(re.escape, TOP_FOLDERS + SERVICES))
PATH = re.compile(rf"(?<![\w/.<>$~-])((?:{FOLDERS})/[\w./*<>{{}}-]*)")
FILE_OR_FOLDER = re.compile(r"(\.[a-z]+|/)$")  # `rollouts/s` (a rate) and `trainer/sampler` (a ratio) are not paths
# The figures of the test suite belong to the pages that measure them.
TEST_COUNT = re.compile(r"\b\d[\d,]* (?:tests|passed|skipped)\b")
MEASURING_PAGES = {"docs/benchmarks.md", "docs/reliability.md"}
DISK_CHECK_IMAGE = re.compile(r'"\$prefix"/([a-z][a-z0-9-]*)')


def named_paths(text: str) -> list[str]:
    """The repository paths a page names, less globs and placeholders."""
    found = []
    for match in PATH.finditer(text):
        path = match.group(1).rstrip(".,:;)")
        if any(mark in path for mark in "*<>{}"):
            continue
        if path.split("/")[0] not in TOP_FOLDERS and not FILE_OR_FOLDER.search(path):
            continue
        found.append(path)
    return found


def exists(path: str) -> bool:
    return (REPO / path).exists() or (REPO / "services/veri" / path).exists()


def test_every_path_the_docs_name_exists():
    checked, missing = 0, {}
    for page in PAGES:
        paths = named_paths(page.read_text(encoding="utf-8"))
        checked += len(paths)
        if gone := sorted({path for path in paths if not exists(path)}):
            missing[str(page.relative_to(REPO))] = gone
    assert checked > 200, checked  # the pages name hundreds: a PATH that reads none is broken
    assert not missing, f"the docs name files that do not exist (moved? a module that became a package?): {missing}"


def test_a_module_that_became_a_package_is_caught():
    assert named_paths("the weight sync (`services/policy/vllm.py`), `services/veri/core/episodes.py`, rollouts/s") == \
        ["services/policy/vllm.py", "services/veri/core/episodes.py"]
    assert not exists("services/policy/vllm.py") and exists("services/policy/vllm/")
    assert exists("services/veri/core/episodes.py")


@pytest.mark.needs("process")
def test_disk_check_counts_the_images_make_images_builds():
    images = make_images()
    assert images[:2] == ["os-base", "base"] and "runtime" in images, images
    counted = DISK_CHECK_IMAGE.findall((REPO / "scripts/disk-check.sh").read_text(encoding="utf-8"))
    assert [image for image in counted if image in images] == images, (
        f"scripts/disk-check.sh counts {counted}; make images builds {images}")
    listed = subprocess.run(["make", "--no-print-directory", "-s", "help"], cwd=REPO, capture_output=True,
                            text=True, check=True).stdout  # generated from the rules' `##` comments
    help_line = next(line for line in listed.splitlines() if line.startswith("make images "))
    assert re.findall(r"veri/([a-z][a-z0-9-]*)", help_line) == images, help_line


def test_test_counts_live_on_the_pages_that_measure_them():
    restated = {str(page.relative_to(REPO)): TEST_COUNT.findall(text) for page in PAGES
                if str(page.relative_to(REPO)) not in MEASURING_PAGES
                and TEST_COUNT.findall(text := page.read_text(encoding="utf-8"))}
    assert not restated, f"test counts restated away from docs/benchmarks.md (link to it instead): {restated}"
    assert TEST_COUNT.findall("862 tests in 24.7 min; pass 2: 157 passed, 10 skipped") == \
        ["862 tests", "157 passed", "10 skipped"]
