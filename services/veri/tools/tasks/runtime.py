"""A bundle's runtime tree: what the harness needs to run inside any task image, mounted read-only at
/veri/rt (docs/design/harbor-tasks.md §3.1). Built once per bundle image (cached by the image id):

  bin/python3.11, lib/python3.11/     the image's Python and stdlib, /opt/venv's packages as
                                      lib/python3/dist-packages (where Debian's site.py looks),
                                      byte-compiled (the mount is read-only: no .pyc would mean compiling
                                      the SDKs on every run)
  harness/                            the bundle's code (/harness)
  bin/unshare setpriv mount tar timeout   veri's own copies, for the agent's and the verifier's recipe: the
                                      task image may lack them, or the agent may have replaced them
  bin/claude                          a two-line sh wrapper: Claude Code (a Bun executable that reads its
                                      payload from its own file, so patchelf breaks it) through veri's loader
  bin/codex                           as is (a static-pie musl binary)
  lib/                                every shared library they load, glibc and its loader included

Every ELF file but claude's and codex's gets patchelf's interpreter /veri/rt/lib/ld-linux-x86-64.so.2 and
rpath /veri/rt/lib, so the tree runs whatever libc the task image has (or none)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker

from veri.tools.tasks.layout import RUNTIME_MOUNT, default_build_dir

TREE_VERSION = "2"  # bump when the tree's layout changes: every bundle's tree is then rebuilt
LOADER = "ld-linux-x86-64.so.2"
UNPATCHED = {"claude.bin", "codex"}  # patchelf breaks Bun's payload; codex is static
TOOLS = ("/usr/bin/unshare", "/usr/bin/setpriv", "/bin/mount", "/bin/umount", "/bin/tar", "/usr/bin/timeout")

Log = Callable[[str], None]

# Runs in the bundle image as root, no network: copies the files out to /out with their library closure.
_COPY = r"""
set -e
mkdir -p /out/bin /out/lib
py=$(readlink -f /usr/bin/python3); ver=$(basename "$py")
cp -L "$py" "/out/bin/$ver"
cp -a "/usr/lib/$ver" "/out/lib/$ver"
cd "/out/lib/$ver"
rm -rf test idlelib tkinter lib2to3 ensurepip config-*-x86_64-linux-gnu site-packages dist-packages
find . -name __pycache__ -prune -exec rm -rf {} +
if [ -d /opt/venv ]; then
  mkdir -p /out/lib/python3  # Debian's site.py reads <prefix>/lib/python3/dist-packages
  cp -a "/opt/venv/lib/$ver/site-packages" /out/lib/python3/dist-packages
  rm -rf /out/lib/python3/dist-packages/pip /out/lib/python3/dist-packages/setuptools \
         /out/lib/python3/dist-packages/_distutils_hack /out/lib/python3/dist-packages/distutils-precedence.pth
fi
ln -s "$ver" /out/bin/python3; ln -s "$ver" /out/bin/python
[ -d /harness ] && cp -a /harness /out/harness
for t in TOOLS; do [ -e "$t" ] && cp -L "$t" /out/bin/; done
[ -e /usr/local/bin/claude ] && cp -L /usr/local/bin/claude /out/bin/claude.bin
[ -e /usr/local/bin/codex ] && cp -L /usr/local/bin/codex /out/bin/codex
find /out -type f \( -name "*.so*" -o -perm -u+x \) ! -name claude.bin ! -name codex | while read -r f; do
  head -c4 "$f" | grep -q ELF || continue
  ldd "$f" 2>/dev/null | awk '/=> \//{print $3} /ld-linux/{print $1}'
done | sort -u | while read -r lib; do cp -Ln "$lib" /out/lib/ 2>/dev/null || true; done
"/out/bin/$ver" -m compileall -q -j0 -s /out -p /veri/rt /out/lib /out/harness >/dev/null 2>&1 || true
chown -R OWNER /out
"""

_CLAUDE = f"""#!/bin/sh
exec {RUNTIME_MOUNT}/lib/{LOADER} --library-path {RUNTIME_MOUNT}/lib {RUNTIME_MOUNT}/bin/claude.bin "$@"
"""


class RuntimeTreeError(RuntimeError):
    """The runtime tree could not be built; the message says why."""


def _is_elf(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def _patch(tree: Path) -> int:
    """Point every ELF file (but UNPATCHED) at the tree's loader and libraries. Returns how many."""
    if not shutil.which("patchelf"):
        raise RuntimeTreeError("patchelf is missing: apt-get install patchelf (make docker installs it)")
    count = 0
    for path in sorted(tree.rglob("*")):
        if path.is_symlink() or not path.is_file() or path.name in UNPATCHED or path.name == LOADER:
            continue
        if not _is_elf(path):
            continue
        has_interpreter = subprocess.run(["patchelf", "--print-interpreter", str(path)],
                                         capture_output=True).returncode == 0
        if has_interpreter:
            subprocess.run(["patchelf", "--set-interpreter", f"{RUNTIME_MOUNT}/lib/{LOADER}", str(path)], check=True)
        subprocess.run(["patchelf", "--force-rpath", "--set-rpath", f"{RUNTIME_MOUNT}/lib", str(path)],
                       capture_output=True)
        count += 1
    return count


def build_runtime_tree(bundle_image: str, out: Path, client: Any = None, log: Log | None = None) -> Path:
    """Build the tree of bundle_image into out (replaced). Returns out."""
    log = log or (lambda line: print(line, file=sys.stderr))
    client = client or docker.from_env(timeout=600)
    start = time.monotonic()
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        script = _COPY.replace("TOOLS", " ".join(TOOLS)).replace("OWNER", f"{os.getuid()}:{os.getgid()}")
        try:
            client.containers.run(bundle_image, ["sh", "-c", script], entrypoint=[], user="0", network_mode="none",
                                  volumes={str(work): {"bind": "/out", "mode": "rw"}}, remove=True)
        except docker.errors.ContainerError as exc:
            raise RuntimeTreeError(f"copying the runtime out of {bundle_image} failed: {exc.stderr!r}") from None
        if not (work / "lib" / LOADER).is_file():
            raise RuntimeTreeError(f"{bundle_image}: no {LOADER} found (a glibc x86_64 image with python3 is needed)")
        patched = _patch(work)
        if (work / "bin" / "claude.bin").is_file():
            (work / "bin" / "claude").write_text(_CLAUDE)
            (work / "bin" / "claude").chmod(0o755)
        (work / ".complete").write_text(f"{bundle_image}\n")
        work.chmod(0o755)  # mkdtemp's 0700 would shut out the harness's non-root user
        if (out / ".complete").is_file():  # another build of the same inputs finished first: keep its tree
            return out
        if out.exists():
            shutil.rmtree(out)
        work.rename(out)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    log(f"runtime tree of {bundle_image}: {out} ({patched} ELF files patched, {time.monotonic() - start:.0f} s)")
    return out


def runtime_tree(bundle_image: str, *, build_dir: Path | None = None, client: Any = None,
                 log: Log | None = None) -> Path:
    """The runtime tree of bundle_image (built the first time, then cached by the image's id), to mount
    read-only at /veri/rt. Its Python: /veri/rt/bin/python3; the harness: /veri/rt/harness."""
    client = client or docker.from_env(timeout=600)
    try:
        image_id = str(client.images.get(bundle_image).id)
    except docker.errors.ImageNotFound:
        raise RuntimeTreeError(f"bundle image {bundle_image} is not on this machine: `veri harness build` it") from None
    out = (build_dir or default_build_dir()) / "runtime" / f"{image_id.split(':')[-1][:16]}-v{TREE_VERSION}"
    if (out / ".complete").is_file():
        return out
    return build_runtime_tree(bundle_image, out, client, log)
