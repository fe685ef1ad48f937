"""`veri tasks build PATH... [--image-map FROM=LOCAL]`: a task's environment/Dockerfile -> its image,
offline. Only the `FROM` lines change (mapped, logged); apt and pip reach the build proxy
(build_proxy.py) through Docker's predefined proxy build args. A `FROM` that is neither on this machine
nor mapped is named with the fix before any build. The tag `veri/task-<name>:<hash>` covers environment/,
the map, the mapped images' ids and the vendored inputs: an unchanged task is not rebuilt."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker

from veri.tools.tasks.build_proxy import BuildProxy
from veri.tools.tasks.lines import base_images, lookup, map_from_lines

BUILDER_VERSION = "1"  # bump when what a build sends changes: every task image then gets a new tag
TASK_BASE = "veri/task-os-base"  # the Debian base an unreachable `FROM ubuntu:...` is usually mapped to
# veri/os-base with apt asking for no Translation files (none are vendored) and trusting the vendored
# indexes past their Valid-Until (a vendored snapshot is old by design: it is still Debian's signature),
# and pip pointed at the build proxy's index.
TASK_BASE_DOCKERFILE = """FROM veri/os-base
RUN printf 'Acquire::Languages "none";\\nAcquire::Check-Valid-Until "false";\\n' \\
      >/etc/apt/apt.conf.d/99veri-offline \\
 && printf '[global]\\nindex-url = http://pypi.veri.internal/simple/\\ntrusted-host = pypi.veri.internal\\n' \\
      >/etc/pip.conf
"""
LABEL_TASK_BASE = "org.veri.task-base"  # the hash of TASK_BASE_DOCKERFILE and veri/os-base's id it was built from
LABEL_TASK = "org.veri.task"
IGNORED = {".git", "__pycache__", ".DS_Store"}

Log = Callable[[str], None]


class TaskBuildError(RuntimeError):
    """The task's image could not be built; the message says why and what to do."""


def parse_image_map(pairs: list[str]) -> dict[str, str]:
    """`FROM=LOCAL` strings -> a dict (the CLI's --image-map)."""
    out = {}
    for pair in pairs:
        source, sep, target = pair.partition("=")
        if not sep or not source or not target:
            raise TaskBuildError(f"--image-map {pair!r}: write FROM=LOCAL, e.g. ubuntu:24.04={TASK_BASE}")
        out[source.strip()] = target.strip()
    return out


def _image_id(client: Any, image: str) -> str | None:
    try:
        return str(client.images.get(image).id)
    except docker.errors.ImageNotFound:
        return None


def ensure_task_base(client: Any, log: Log) -> None:
    """Build veri/task-os-base (from veri/os-base, `make images`) when it is missing or out of date."""
    os_base = _image_id(client, "veri/os-base")
    if not os_base:
        raise TaskBuildError(f"{TASK_BASE} is built from veri/os-base, which is missing: run `make images`")
    want = hashlib.sha256(f"{TASK_BASE_DOCKERFILE}{os_base}".encode()).hexdigest()[:16]
    try:
        if (client.images.get(TASK_BASE).labels or {}).get(LABEL_TASK_BASE) == want:
            return
    except docker.errors.ImageNotFound:
        pass
    log(f"tasks build: building {TASK_BASE} from veri/os-base")
    with tempfile.TemporaryDirectory() as context:
        Path(context, "Dockerfile").write_text(TASK_BASE_DOCKERFILE)
        _docker_build(["-t", TASK_BASE, "--label", f"{LABEL_TASK_BASE}={want}", context], log)


def resolve_bases(client: Any, dockerfile: str, image_map: dict[str, str], task: Path, log: Log) -> dict[str, str]:
    """{FROM image: the local image id it builds on}. Raises, naming every unreachable FROM and the fix."""
    ids, problems = {}, []
    for image in base_images(dockerfile):
        target = lookup(image_map, image) or image
        if target == TASK_BASE:
            ensure_task_base(client, log)
        image_id = _image_id(client, target)
        if image_id:
            ids[image] = image_id
        elif target != image:
            problems.append(f"FROM {image} is mapped to {target}, which is not on this machine: build or load it")
        else:
            problems.append(f"FROM {image} is not on this machine and not mapped (builds run offline): pass "
                            f"--image-map {image}={TASK_BASE} (Debian bookworm with apt and pip served offline), "
                            f"or `docker load` the image")
    if problems:
        raise TaskBuildError(f"{task}:\n  " + "\n  ".join(problems))
    return ids


def _files(folder: Path) -> list[Path]:
    out = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in IGNORED)
        out += [Path(root, n) for n in sorted(names) if n not in IGNORED]
    return out


def _sha(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def content_hash(environment: Path, mapped: dict[str, str], base_ids: dict[str, str], vendor: Path) -> str:
    """Of environment/'s files (names, modes, bytes), the applied map, the bases' ids and the vendored inputs
    (the .debs' lock, the wheels' and the indexes' names and sizes)."""
    digest = hashlib.sha256(f"builder {BUILDER_VERSION}\n".encode())
    for path in _files(environment):
        rel = path.relative_to(environment).as_posix()
        kind = f"link {os.readlink(path)}" if path.is_symlink() else f"{path.stat().st_mode & 0o111:o} {_sha(path)}"
        digest.update(f"file {rel} {kind}\n".encode())
    for source, target in sorted(mapped.items()):
        digest.update(f"map {source}={target}\n".encode())
    for image, image_id in sorted(base_ids.items()):
        digest.update(f"base {image} {image_id}\n".encode())
    lock = vendor / "debs" / "lock.txt"
    digest.update(lock.read_bytes() if lock.is_file() else b"no debs\n")
    for sub in ("wheels", "apt"):
        for path in _files(vendor / sub) if (vendor / sub).is_dir() else []:
            digest.update(f"{sub} {path.relative_to(vendor).as_posix()} {path.stat().st_size}\n".encode())
    return digest.hexdigest()[:16]


def task_tag(task: Path, digest: str, prefix: str = "veri") -> str:
    name = re.sub(r"[^a-z0-9_.-]+", "-", task.resolve().name.lower()).strip("-.") or "task"
    return f"{prefix}/task-{name}:{digest}"


def _docker_build(args: list[str], log: Log) -> str:
    """`docker build` (the CLI: it honours .dockerignore and a Dockerfile outside the context)."""
    done = subprocess.run(["docker", "build", *args], capture_output=True, text=True,
                          env={**os.environ, "DOCKER_BUILDKIT": "0"})
    if done.returncode != 0:
        raise TaskBuildError(f"docker build failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return done.stdout


def build_task_image(task: Path, vendor: Path, *, image_map: dict[str, str] | None = None,
                     client: Any = None, prefix: str = "veri",
                     log: Log = lambda line: print(line, file=sys.stderr)) -> str:
    """Build (or find, by its content hash) the image of the task folder `task` (environment/Dockerfile),
    offline, with apt and pip answered from `vendor` (vendor/tasks/). Returns its tag."""
    environment = task / "environment"
    dockerfile_path = environment / "Dockerfile"
    if not dockerfile_path.is_file():
        raise TaskBuildError(f"{task}: no environment/Dockerfile (a task folder holds environment/Dockerfile)")
    client = client or docker.from_env(timeout=600)
    dockerfile = dockerfile_path.read_text()
    image_map = image_map or {}
    base_ids = resolve_bases(client, dockerfile, image_map, task, log)
    mapped_text, applied = map_from_lines(dockerfile, image_map)
    tag = task_tag(task, content_hash(environment, applied, base_ids, vendor), prefix)
    if _image_id(client, tag):
        log(f"tasks build: {tag} is up to date")
        return tag
    for source, target in applied.items():
        log(f"tasks build: {task.name}: FROM {source} -> FROM {target}")
    with tempfile.TemporaryDirectory() as tmp, BuildProxy(vendor) as proxy:
        mapped_file = Path(tmp, "Dockerfile")
        mapped_file.write_text(mapped_text)
        proxy_args = []
        for name in ("http_proxy", "HTTP_PROXY"):
            proxy_args += ["--build-arg", f"{name}={proxy.url}"]
        for name in ("https_proxy", "HTTPS_PROXY"):  # https goes nowhere: the proxy refuses CONNECT
            proxy_args += ["--build-arg", f"{name}={proxy.url}"]
        args = ["--network", "host", "-f", str(mapped_file), "-t", tag, "--label", f"{LABEL_TASK}={task.name}",
                *proxy_args, str(environment)]
        log(f"tasks build: {task.name} -> {tag} (offline; apt and pip through {proxy.url})")
        try:
            _docker_build(args, log)
        except TaskBuildError as exc:
            missing = "\n  ".join(dict.fromkeys(proxy.answers.missing)) or "(nothing: the proxy answered all)"
            raise TaskBuildError(f"{task}: {exc}\nnot vendored (the build asked for these):\n  {missing}\n"
                                 f"fix: `veri tasks vendor {task}` on a machine with network, or change the "
                                 "Dockerfile") from None
        log(f"tasks build: {tag} built ({len(proxy.answers.served)} answers from the proxy, "
            f"{len(proxy.answers.missing)} not vendored)")
    return tag


def build_tasks(tasks: list[Path], vendor: Path, *, image_map: dict[str, str] | None = None,
                client: Any = None, prefix: str = "veri", log: Log = lambda line: print(line, file=sys.stderr),
                ) -> dict[Path, str]:
    """Every task's image (the FROM lines of all are checked before any build). {task: tag}."""
    client = client or docker.from_env(timeout=600)
    problems = []
    for task in tasks:
        dockerfile = task / "environment" / "Dockerfile"
        if not dockerfile.is_file():
            problems.append(f"{task}: no environment/Dockerfile (a task folder holds environment/Dockerfile)")
            continue
        try:
            resolve_bases(client, dockerfile.read_text(), image_map or {}, task, log)
        except TaskBuildError as exc:
            problems.append(str(exc))
    if problems:
        raise TaskBuildError("\n".join(problems))
    return {task: build_task_image(task, vendor, image_map=image_map, client=client, prefix=prefix, log=log)
            for task in tasks}
