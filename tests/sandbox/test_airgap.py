"""The air-gapped install, proven end to end (docs/air-gapped.md), as a user would do it:

online box:  a snapshot of this tree as a fresh git repo with its vendor/ (make vendor's output),
             `make vendor-base-image` for a custom base, `make bundle`
air gap:     the images removed, the source folder (and its vendor/) deleted
offline box: `load.sh` straight from the archive into a new folder, then `make images` (nothing to
             rebuild), `make base-image` (the custom base, its wheels from the bundle), and `make train`
             (2 steps, tiny model) through a harness bundle FROM that base,
with pip, npm and apt pointed at an unreachable address and every compose network either internal or
without a route out (no IP masquerade).

Images get their own prefix (veriair/*), so the images other tests and users run are never removed;
they start as tags of veri/* (their inputs are the same: build-image.sh keys by parents' ids), so a
veri/* built from this tree makes nothing rebuild, and layers they share stay on the machine (the
archive still holds every layer: docker save writes them all, and its sha256s are checked).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
import time
from pathlib import Path

import docker
import pytest
import yaml

from testkit.demo import answer_rule, fetch_rule, tool_call
from testkit.servers import free_port
from tests.sandbox.conftest import ROOT

# Opt-in (make test-airgap): about 7 min of docker save / load, a fresh .venv and a training job,
# more than make test's budget may grow by. tests/sandbox/test_image_digest.py is its part in make
# test: a git archive tree finds the images of the tree it came from up to date.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2700),
              pytest.mark.skipif(os.environ.get("AIRGAP_TEST") != "1", reason="opt-in: make test-airgap")]

PREFIX = "veriair"
IMAGES = ["os-base", "base", "base-claude-agent", "base-codex-agent", "runtime"]
VENDOR_PARTS = ["os", "wheels/base", "wheels/claude-agent", "wheels/runtime", "npm", "npm-codex"]
NOWHERE = "http://127.0.0.1:9/"  # the discard port: nothing listens
OFFLINE = {
    "PIP_INDEX_URL": NOWHERE, "PIP_EXTRA_INDEX_URL": "", "npm_config_registry": NOWHERE,
    "http_proxy": NOWHERE, "https_proxy": NOWHERE, "HTTP_PROXY": NOWHERE, "HTTPS_PROXY": NOWHERE,
    "ALL_PROXY": NOWHERE, "no_proxy": "127.0.0.1,localhost", "NO_PROXY": "127.0.0.1,localhost",
}
BASE_DOCKERFILE = """\
# A user's harness base, built offline: requirements.txt's wheels come from vendor/ (make vendor-base-image).
ARG BASE_IMAGE=veri/base
FROM ${BASE_IMAGE}
USER root
ARG VENDOR_URL
RUN NO_PROXY=127.0.0.1 pip install --no-cache-dir --no-index --find-links "$VENDOR_URL/wheels/" \\
      -r "$VENDOR_URL/wheels/requirements.txt"
USER harness
"""


def run(cmd: list[str] | str, cwd: Path, env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          shell=isinstance(cmd, str))
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done


def snapshot(dest: Path) -> None:
    """This working tree (tracked and new files, not ignored ones), copied."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        source = ROOT / rel
        if source.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / rel)


def commit(repo: Path) -> None:
    git = ["git", "-c", "user.name=veri test", "-c", "user.email=test@veri.invalid"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "snapshot"]):
        subprocess.run([*git, *args], cwd=repo, check=True, capture_output=True)


def add_user_files(repo: Path) -> None:
    """What a user adds: a custom base with a requirement, a bundle FROM it, and the tiny job on that bundle."""
    base = repo / "airgap" / "airbase"
    base.mkdir(parents=True)
    (base / "Dockerfile").write_text(BASE_DOCKERFILE)
    (base / "requirements.txt").write_text("six==1.17.0\n")
    bundle = repo / "airgap" / "bundle"
    shutil.copytree(ROOT / "harness-bundles" / "url_extract_openai", bundle)
    (bundle / "requirements.txt").unlink()
    (bundle / "run.sh").write_text("python -c 'import six'  # from the custom base\nexec python agent.py\n")
    (bundle / "veri-harness.toml").write_text(textwrap.dedent(f"""\
        name = "airgap_openai"
        entrypoint = ["sh", "-e", "run.sh"]
        base_image = "{PREFIX}/airbase"
        protocol = "openai"
    """))
    job = yaml.safe_load((ROOT / "tests" / "stack" / "train_job" / "job.yaml").read_text())
    job["harness_bundle"] = "airgap/bundle"
    (repo / "airgap" / "job.yaml").write_text(yaml.safe_dump(job))


def seal_networks(repo: Path) -> None:
    """Every compose network internal or without a way out: no NAT to the outside for non-internal ones
    (the published ports on 127.0.0.1 still work)."""
    path = repo / "compose.yaml"
    compose = yaml.safe_load(path.read_text())
    for network in compose["networks"].values():
        if not network.get("internal"):
            network.setdefault("driver_opts", {})["com.docker.network.bridge.enable_ip_masquerade"] = "false"
    path.write_text(yaml.safe_dump(compose, sort_keys=False))


def remove_images(client: docker.DockerClient) -> None:
    # The CLI, not the SDK: removing gigabytes of layers on a busy daemon outlasts the SDK's timeout.
    tags = [tag for image in client.images.list(name=f"{PREFIX}/*") for tag in image.tags
            if tag.startswith(f"{PREFIX}/")]
    if tags:
        subprocess.run(["docker", "image", "rm", "-f", *tags], capture_output=True, timeout=1800)


def figures(text: str, prefix: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(prefix)]


@pytest.fixture
def workspace(tmp_path, docker_client):
    remove_images(docker_client)
    try:
        yield tmp_path
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)  # the archive, both trees, their vendor/ and .venv: GBs
        remove_images(docker_client)


def test_bundle_load_and_train_with_no_network(workspace, docker_client):
    client = docker_client
    src, dst, archive = workspace / "online", workspace / "offline", workspace / "veri-bundle.tar"
    src.mkdir()
    started = time.monotonic()
    # --- the online box ---
    snapshot(src)
    add_user_files(src)
    commit(src)
    for part in VENDOR_PARTS:  # make vendor's output, hard-linked (the same files, no copy)
        (src / "vendor" / part).parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-al", str(ROOT / "vendor" / part), str(src / "vendor" / part)], check=True)
    for name in IMAGES:
        client.images.get(f"veri/{name}").tag(f"{PREFIX}/{name}")
    online = {**os.environ, "IMAGE_PREFIX": PREFIX}
    run(["make", "--no-print-directory", "vendor-base-image", "DOCKERFILE=airgap/airbase/Dockerfile"], src, online)
    made = run(["make", "--no-print-directory", "bundle", f"BUNDLE_OUT={archive}",
                f"BUNDLE_IMAGES={' '.join(f'{PREFIX}/{n}' for n in IMAGES)}"], src, online, timeout=1800)
    print("\n".join(figures(made.stdout, "bundle:") + figures(made.stdout, "build-image:")))
    manifest = json.loads(subprocess.run(["tar", "-xOf", str(archive), "veri-bundle/manifest.json"],
                                         capture_output=True, check=True).stdout)
    assert [i["name"] for i in manifest["images"]] == [f"{PREFIX}/{n}" for n in IMAGES]
    assert any(f["path"].startswith("vendor/wheels/base-images/") for f in manifest["files"])
    online_s = time.monotonic() - started

    # --- the air gap: nothing of the online side is left ---
    remove_images(client)
    shutil.rmtree(src)
    assert not client.images.list(name=f"{PREFIX}/*")

    # --- the offline box ---
    offline = {**{k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "IMAGE_PREFIX")}, **OFFLINE}
    offline["PATH"] = ":".join(p for p in offline["PATH"].split(":") if ".venv" not in p)
    started = time.monotonic()
    loaded = run(f"tar -xOf {archive} veri-bundle/load.sh | bash -s -- {archive} {dst}", workspace, offline,
                 timeout=1800)
    print(loaded.stdout)
    load_s = time.monotonic() - started
    assert (dst / "vendor" / "wheels" / "runtime" / "lock.txt").is_file() and (dst / ".venv" / "bin" / "veri").exists()
    seal_networks(dst)
    make = ["make", "--no-print-directory", f"IMAGE_PREFIX={PREFIX}"]
    started = time.monotonic()
    images = run([*make, "images"], dst, offline, timeout=1800)
    assert " built in " not in images.stdout, images.stdout  # every image came from the bundle
    images_s = time.monotonic() - started
    started = time.monotonic()
    base = run([*make, "base-image", f"NAME={PREFIX}/airbase", "DOCKERFILE=airgap/airbase/Dockerfile",
                f"BUILD_ARGS=BASE_IMAGE={PREFIX}/base"], dst, offline)
    print("\n".join(figures(base.stdout, "build-image:")))
    base_s = time.monotonic() - started

    state = workspace / "state"
    state.mkdir()
    rows = [json.loads(line) for line in (ROOT / "config" / "data" / "url_extract.jsonl").read_text().splitlines()]
    rules = [answer_rule(row) for row in rows]
    rules += [fetch_rule(row, tool_call("fetch_url", {"url": row["url"]})) for row in rows]
    (state / "jobs").mkdir()  # the policy sees only the state folder's jobs/ (read-only)
    (state / "jobs" / "script.json").write_text(json.dumps(rules))
    project = f"veriair-{os.getpid()}"
    stack = {**offline, "VERI_PROJECT": project, "VERI_STATE_DIR": str(state), "VERI_PROXY_PORT": str(free_port()),
             "VERI_CONSOLE_PORT": str(free_port()), "VERI_ROLLOUTS_NETWORK": f"{project}-rollouts",
             "VERI_POLICY_SCRIPTED_REPLIES": "/state/jobs/script.json"}
    try:
        started = time.monotonic()
        trained = run([*make, "train", "CONFIG=airgap/job.yaml", "NAME=air"], dst, stack, timeout=1800)
        train_s = time.monotonic() - started
        job = state / "jobs" / "air"
        metrics = [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines()]
        assert [m["step"] for m in metrics] == [0, 1], trained.stdout[-3000:]
        records = [json.loads(p.read_text()) for p in (job / "trajectories").rglob("rollout-*.json")]
        assert len(records) == 8 and all(r["status"] == "completed" for r in records), \
            [(r["status"], r.get("episode", {}).get("verdicts")) for r in records]
        assert any(r["reward"]["per_function"]["reward"] == 1.0 for r in records)
        # the stack's networks: internal, or no way out
        for network in client.networks.list(filters={"label": f"com.docker.compose.project={project}"}):
            with pytest.raises(docker.errors.ContainerError):
                client.containers.run(f"{PREFIX}/runtime", ["python3", "-c",
                                      "import socket; socket.create_connection(('1.1.1.1', 443), 5)"],
                                      network=network.name, entrypoint=[], remove=True)
    finally:
        subprocess.run([*make, "down"], cwd=dst, env=stack, capture_output=True, timeout=300)
    print(f"airgap: online side {online_s:.0f} s, load {load_s:.0f} s, make images {images_s:.0f} s,"
          f" make base-image {base_s:.0f} s, make train {train_s:.0f} s")
