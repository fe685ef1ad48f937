"""`veri tasks vendor PATH...` (online, once): everything the tasks' offline builds and verifiers fetch,
into vendor/tasks/ (layout.py): the .debs of the Dockerfiles' `apt-get install` lines with their
Recommends (scripts/docker/vendor-debs.sh), Debian's signed indexes the build proxy answers
`apt-get update` from, the wheels of the `pip install X==V` lines, and the verifier's tools (PyPI's `uv`
musllinux wheel, the wheels the test.sh lines name)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from veri.tools.tasks.build_proxy import DEBIAN_HOST
from veri.tools.tasks.layout import checkout_root
from veri.tools.tasks.lines import Wants, dockerfile_wants, script_wants

UV_VERSION = "0.13.9"  # the static uv/uvx the verifier runs (PyPI's musllinux wheel of `uv`)
PYTHON_VERSION = "3.11"  # the Python the wheels are for: Debian bookworm's (the mapped base, veri's runtime)
SUITE = "bookworm"
DEFAULT_BASE = "veri/os-base"  # the image whose installed packages need no .deb
# (mirror path under deb.debian.org, suite): what veri/os-base's sources.list names
APT_SUITES = (("debian", SUITE), ("debian", f"{SUITE}-updates"), ("debian-security", f"{SUITE}-security"))
WHEEL_PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64", "linux_x86_64")

Log = Callable[[str], None]


class VendorError(RuntimeError):
    """Something could not be vendored; the message says what and how to fix it."""


@dataclass
class TaskWants:
    """What a set of tasks fetches: at build time (the Dockerfiles) and at verify time (the test.sh files)."""
    build: Wants = field(default_factory=Wants)
    verifier: Wants = field(default_factory=Wants)


def read_wants(tasks: list[Path]) -> TaskWants:
    """The apt packages and pip requirements that the tasks' environment/Dockerfile and test.sh files name."""
    wants = TaskWants()
    for task in tasks:
        dockerfile = task / "environment" / "Dockerfile"
        if not dockerfile.is_file():
            raise VendorError(f"{task}: no environment/Dockerfile (a task folder holds environment/Dockerfile)")
        wants.build.add(dockerfile_wants(dockerfile.read_text()))
        for test_sh in [task / "tests" / "test.sh", *sorted(task.glob("steps/*/tests/test.sh"))]:  # multi-step tasks
            if test_sh.is_file():
                wants.verifier.add(script_wants(test_sh.read_text()))
    return wants


def pip_download(requirements: list[str], out: Path, log: Log, *, deps: bool = True,
                 platforms: tuple[str, ...] = WHEEL_PLATFORMS) -> None:
    """Wheels for Debian's Python on x86_64 (never sdists: an offline build cannot compile them)."""
    if not requirements:
        return
    out.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "-q", "-d", str(out), "--only-binary=:all:",
               "--python-version", PYTHON_VERSION, "--implementation", "cp", "--disable-pip-version-check"]
    command += [f"--platform={p}" for p in platforms] + ([] if deps else ["--no-deps"]) + requirements
    log(f"vendor: wheels {' '.join(requirements)} -> {out}")
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise VendorError(f"pip download {' '.join(requirements)} failed (is PyPI reachable? are these wheels for "
                          f"Python {PYTHON_VERSION} on x86_64?):\n{done.stderr.strip()[-2000:]}")


def vendor_debs(packages: list[str], out: Path, base_image: str, log: Log) -> None:
    """The .debs (recommends on: a Dockerfile's plain `apt-get install` installs them) base_image lacks."""
    if not packages:
        return
    script = checkout_root() / "scripts" / "docker" / "vendor-debs.sh"
    env = {**os.environ, "RECOMMENDS": "true", "BASE_OS_IMAGE": base_image, "SUITE": SUITE}
    log(f"vendor: debs {' '.join(packages)} (with recommends, what {base_image} lacks) -> {out}")
    done = subprocess.run(["bash", str(script), str(out), *packages], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise VendorError(f"vendor-debs.sh {' '.join(packages)} failed (a Debian {SUITE} mirror in the host's apt "
                          f"sources? package names as Debian spells them?):\n{(done.stdout + done.stderr)[-2000:]}")


def _mirrors() -> tuple[str, str]:
    """(mirror, security mirror) from the host's apt sources (scripts/docker/debian-mirror.sh)."""
    script = checkout_root() / "scripts" / "docker" / "debian-mirror.sh"
    done = subprocess.run(["bash", str(script), SUITE], capture_output=True, text=True)
    if done.returncode != 0 or len(done.stdout.split()) != 2:
        raise VendorError(f"no Debian {SUITE} mirror in this host's apt sources: {done.stderr.strip()} "
                          "(set DEBIAN_MIRROR and DEBIAN_SECURITY_MIRROR)")
    mirror, security = done.stdout.split()
    return mirror.rstrip("/"), security.rstrip("/")


def vendor_apt_indexes(out: Path, log: Log) -> None:
    """Debian's signed indexes (InRelease + Packages.xz, also under by-hash/) as deb.debian.org serves them,
    under out/deb.debian.org/<path>: the mapped base's `apt-get update` then verifies them as usual."""
    mirror, security = _mirrors()
    with httpx.Client(timeout=120, follow_redirects=True) as client:
        for root, suite in APT_SUITES:
            base = (security if root == "debian-security" else mirror) + f"/dists/{suite}"
            local = out / DEBIAN_HOST / root / "dists" / suite
            for rel in ("InRelease", "main/binary-amd64/Packages.xz"):
                response = client.get(f"{base}/{rel}")
                if response.status_code != 200:
                    raise VendorError(f"{base}/{rel}: HTTP {response.status_code} (is the Debian mirror reachable?)")
                (local / rel).parent.mkdir(parents=True, exist_ok=True)
                (local / rel).write_bytes(response.content)
            packages = local / "main/binary-amd64/Packages.xz"
            by_hash = local / "main/binary-amd64/by-hash/SHA256" / hashlib.sha256(packages.read_bytes()).hexdigest()
            by_hash.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(packages, by_hash)
            log(f"vendor: apt index {suite} ({packages.stat().st_size // 1024} KiB)")


def vendor_tasks(tasks: list[Path], out: Path, *, base_image: str = DEFAULT_BASE,
                 log: Log = lambda line: print(line, file=sys.stderr)) -> TaskWants:
    """Vendor everything `tasks` fetch into out (vendor/tasks/). Returns what was read from their lines;
    unpinned pip names are not vendored (a build or verifier asking for them fails, naming them)."""
    wants = read_wants(tasks)
    out.mkdir(parents=True, exist_ok=True)
    vendor_apt_indexes(out / "apt", log)
    vendor_debs(wants.build.apt, out / "debs", base_image, log)
    pip_download(wants.build.pins, out / "wheels", log)
    pip_download([f"uv=={UV_VERSION}"], out / "verifier" / "uv", log, deps=False,
                 platforms=("musllinux_1_1_x86_64",))
    pip_download(wants.verifier.pins, out / "verifier" / "wheels", log)
    (out / "verifier" / "wheels").mkdir(parents=True, exist_ok=True)
    for name in wants.build.unpinned + wants.verifier.unpinned:
        log(f"vendor: not vendored: {name} (pin it as name==version in the Dockerfile or test.sh)")
    return wants
