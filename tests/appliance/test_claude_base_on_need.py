"""veri/base-claude-agent holds Claude Code, whose terms building it accepts (docs/licences.md): `make images` leaves
it out; `make train` and `make eval` build it (make images-claude-agent) for a job whose bundle is FROM it only, and
the CPU demo's is not; `make test` builds it for its tests. scripts/stack/train.sh runs as make runs it, up to the
bundle's image, with `make` and the steps that would build or start anything else stood in for."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.docs.images import make_images
from veri.core.config import read_config_file
from veri.core.harness import BASE_IMAGE_TARGETS, load_manifest
from veri.tools.harness.build import BuildError, build_bundle_image

REPO = Path(__file__).resolve().parents[2]
CPU_DEMO = REPO / "config/url_extract_cpu.yaml"
CLAUDE_BUNDLE = REPO / "harness-bundles/url_extract_claude"


def make(*args: str) -> str:
    """`make -n`: what make would run, nothing run."""
    done = subprocess.run(["make", "--no-print-directory", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.needs("process")
def test_make_images_leaves_it_out_and_make_test_builds_it():
    assert "base-claude-agent" not in make_images() and "base-codex-agent" in make_images()
    for target in ("images", "up", "train", "bundle"):
        assert "scripts/docker/images-claude-agent.sh" not in make("-n", target, "CONFIG=x"), target
    assert "scripts/docker/images.sh" in make("-n", "train", "CONFIG=x")
    assert "scripts/docker/images-claude-agent.sh" in make("-n", "images-claude-agent")
    prepared = make("-s", "--eval", "print-prepared: ; @echo $(TEST_PREPARED)", "print-prepared").split()
    assert "images-claude-agent" in prepared, prepared  # make test's background set-up


def test_the_base_target_of_each_shipped_bundle():
    bases = {bundle.name: load_manifest(bundle).base_image
             for bundle in sorted((REPO / "harness-bundles").iterdir()) if (bundle / "veri-harness.toml").is_file()}
    claude = {name for name, base in bases.items() if BASE_IMAGE_TARGETS[base] == "images-claude-agent"}
    assert claude == {"url_extract_claude", "harbor_claude"}, claude  # the bundles that run Claude Code
    others = {name: BASE_IMAGE_TARGETS[base] for name, base in bases.items() if name not in claude}
    assert set(others.values()) == {"images"}, others  # the CPU demo's url_extract_inline among them


def claude_job(tmp_path: Path) -> Path:
    """The CPU demo with the Claude Code bundle, in a folder of its own (its paths stay the checkout's)."""
    raw = read_config_file(CPU_DEMO)
    raw |= {"harness_bundle": str(CLAUDE_BUNDLE.relative_to(REPO)), "harness_protocol": "anthropic"}
    path = tmp_path / "claude_cpu.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def train_sh(tmp_path: Path, config: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    """train.sh from the checkout with the real `veri stack-env`; `make` records what it is asked, the rest of veri
    (model, doctor, validate) answers yes, and `veri harness build`, the step after the base, stops the run."""
    stubs = tmp_path / "bin"
    stubs.mkdir()
    asked = tmp_path / "make.log"
    (stubs / "make").write_text(f'#!/bin/sh\necho "$*" >>{asked}\n')
    (stubs / "veri").write_text(f'#!/bin/sh\ncase "$1" in\n  stack-env) exec {sys.executable} -m veri.cli "$@" ;;\n'
                                '  harness) echo "train.sh reached veri harness build" >&2; exit 3 ;;\nesac\n')
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    env = {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}", "VERI": str(stubs / "veri"), "COMPOSE": "false",
           "CONFIG": str(config), "VERI_STATE_DIR": str(tmp_path / "state"), "VERI_MODELS_DIR": str(tmp_path)}
    done = subprocess.run(["scripts/stack/train.sh"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    return done, asked.read_text().splitlines() if asked.exists() else []


@pytest.mark.needs("process")
@pytest.mark.parametrize(("job", "builds"), [("cpu_demo", []),
                                             ("claude", ["--no-print-directory images-claude-agent"])])
def test_make_train_builds_it_for_a_bundle_from_it_only(tmp_path: Path, job: str, builds: list[str]):
    config = CPU_DEMO if job == "cpu_demo" else claude_job(tmp_path)
    done, asked = train_sh(tmp_path, config)
    assert done.returncode == 3 and "train.sh reached veri harness build" in done.stderr, done.stderr
    assert asked == builds


def test_a_bundle_whose_base_is_missing_names_the_target_that_builds_it():
    import docker

    class NoImages:
        class images:
            @staticmethod
            def get(name: str):
                raise docker.errors.ImageNotFound(name)

    with pytest.raises(BuildError) as refused:
        build_bundle_image(CLAUDE_BUNDLE, NoImages())
    assert "`make images-claude-agent` builds it" in str(refused.value)
    assert "Anthropic's terms" in str(refused.value)
    with pytest.raises(BuildError) as refused:
        build_bundle_image(REPO / "harness-bundles/url_extract_inline", NoImages())
    assert "`make images` builds it" in str(refused.value)
