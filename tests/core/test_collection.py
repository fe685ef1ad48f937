"""Every tier collects on a machine that never ran `make test`: `make test` collects the whole suite while
its background set-up is still installing Chromium, runsc, the images and the CLIs, so no test module may
need them at import. A tier's tools are checked where its tests run (tests/conftest.py, tests/tiers.py).

The suite is collected from a copy of the tree without `build/` (a fresh clone's state: no images, no
vendored wheels, no Kubernetes build), with a PATH on which the set-up's tools are hidden and no dockerd
to answer."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hidden_tools import path_without

pytestmark = pytest.mark.needs("process")

REPO = Path(__file__).resolve().parents[2]
# What make's set-up installs for the later tiers (make chromium, make docker, the CLIs, the k8s build)
HIDDEN = {"chromium", "chromedriver", "runsc", "docker", "dockerd", "containerd", "kubectl", "kubelet",
          "kube-apiserver", "etcd", "claude", "codex", "docker-compose"}


def _fresh_tree(into: Path) -> Path:
    """The files a clone would have: tracked and untracked-not-ignored (so an uncommitted test counts too)."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                            capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return into


def test_every_tier_collects_with_the_set_ups_tools_missing(tmp_path: Path, tiny_model: Path):
    tree = _fresh_tree(tmp_path / "clone")
    keep = {"LANG", "LC_ALL", "TERM"}
    env = {key: value for key, value in os.environ.items() if key in keep}
    env |= {"PATH": path_without(HIDDEN, tmp_path / "bin"), "HOME": str(tmp_path / "home"),
            "PYTHONPATH": str(tree / "services"), "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock",
            "VERI_TINY_MODEL": str(tiny_model), "PYTHONDONTWRITEBYTECODE": "1"}
    assert not any(shutil.which(tool, path=env["PATH"]) for tool in HIDDEN)
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=600)
    tail = done.stdout[-4000:] + done.stderr[-2000:]
    assert done.returncode == 0, tail
    assert "error" not in done.stdout.splitlines()[-1], tail
    collected = int(done.stdout.splitlines()[-1].split()[0])
    assert collected > 1000, tail  # the whole suite, every tier
