"""`veri harness build DIR`: a bundle folder -> its image, through the Docker SDK.

The image is `FROM base_image` + the bundle at /harness (owned by root: the harness user can read and
run it, not change it) + the bundle's deps, installed here, at build time, offline (`--network none`):
  - pip: `deps.requirements`, from wheels vendored under `vendor/wheels/bundles/<key>/` — downloaded on
    this host the first time (`pip download`, like `make vendor`), reused offline after that. Copy
    that folder with the tree to an air-gapped machine. Requirements the base image already satisfies
    need no wheels at all.
  - npm: `deps.npm`, from an npm cache vendored under `vendor/npm/bundles/<key>/` the same way; the
    base image must have npm.
The tag is `veri/harness-<name>:<hash>`, where the hash covers every file of the bundle, the base
image's id and this builder's version: an unchanged bundle is not rebuilt, and any change (code,
requirements, a rebuilt base) gives a new tag, so a job always names exactly the code it ran.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from veri.core.egress import LABEL_EGRESS
from veri.core.harness import (
    BASE_IMAGE_TARGETS,
    BUNDLE_MOUNT,
    HARNESS_UID,
    OUTPUT_MOUNT,
    HarnessManifest,
    load_manifest,
)

BUILDER_VERSION = "1"  # bump when the generated Dockerfile changes: every bundle then gets a new tag
IGNORED_NAMES = {"__pycache__", ".git", ".hg", ".venv", "venv", "node_modules", ".DS_Store",
                 ".pytest_cache", ".mypy_cache", ".ruff_cache", ".ipynb_checkpoints"}
IGNORED_SUFFIXES = (".pyc", ".pyo")
INIT_PROGRAMS = ("tini", "dumb-init", "docker-init")
LABEL_BUNDLE = "org.veri.bundle"
LABEL_HASH = "org.veri.bundle-hash"

Log = Callable[[str], None]


class BuildError(RuntimeError):
    """The bundle's image could not be built; the message says why and what to do."""


@dataclass(frozen=True)
class BundleEntry:
    rel: str  # posix path inside the bundle
    path: Path
    kind: str  # "file" | "dir" | "symlink"
    executable: bool = False
    target: str = ""


# --- content hash and tag ----------------------------------------------------------------------

def bundle_entries(bundle: Path) -> list[BundleEntry]:
    """Every file, folder and symlink of the bundle (caches and VCS folders left out), sorted."""
    entries: list[BundleEntry] = []

    def walk(folder: Path, prefix: str) -> None:
        for path in sorted(folder.iterdir(), key=lambda p: p.name):
            if path.name in IGNORED_NAMES or path.name.endswith(IGNORED_SUFFIXES):
                continue
            rel = f"{prefix}{path.name}"
            if path.is_symlink():
                entries.append(BundleEntry(rel, path, "symlink", target=os.readlink(path)))
            elif path.is_dir():
                entries.append(BundleEntry(rel, path, "dir"))
                walk(path, rel + "/")
            elif path.is_file():
                entries.append(BundleEntry(rel, path, "file", executable=os.access(path, os.X_OK)))

    walk(bundle, "")
    return entries


def content_hash(entries: list[BundleEntry], base_image_id: str) -> str:
    digest = hashlib.sha256(f"veri-harness-build {BUILDER_VERSION}\nbase {base_image_id}\n".encode())
    for entry in entries:
        if entry.kind == "file":
            detail = _file_sha256(entry.path) + ("+x" if entry.executable else "")
        else:
            detail = entry.target
        digest.update(f"{entry.kind} {entry.rel}\0{detail}\n".encode())
    return digest.hexdigest()


def image_repository(manifest: HarnessManifest, prefix: str = "veri") -> str:
    # Docker repository names allow single . or _ , __ , or runs of - between alphanumerics.
    name = re.sub(r"[._-]{2,}", lambda m: m.group() if m.group() == "__" or set(m.group()) == {"-"} else "-",
                  manifest.name).strip("._-")
    return f"{prefix}/harness-{name}"


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


# --- vendored deps (the one online step) ------------------------------------------------------

def default_vendor_root() -> Path:
    """`vendor/` of this checkout when there is one (make vendor's folder), else ./vendor."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").is_file() and (parent / "services").is_dir():
            return parent / "vendor"
    return Path.cwd() / "vendor"


def _deps_key(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _image_python(client: Any, image: str) -> str | None:
    """MAJOR.MINOR of `python3` in the image (a throwaway container, no network)."""
    try:
        out = client.containers.run(image, ["python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                    entrypoint=[], network_mode="none", remove=True, user="0")
        return out.decode().strip() or None
    except Exception:  # noqa: BLE001 - no python3 in the image: nothing to vendor for it
        return None


def pip_vendor_dir(requirements: Path, vendor_root: Path) -> Path:
    """Where the wheels for this requirements file are vendored (complete when it holds `.complete`)."""
    return vendor_root / "wheels" / "bundles" / _deps_key("pip", requirements.read_text())


def npm_vendor_dir(packages: list[str], vendor_root: Path) -> Path:
    """Where the npm cache for these packages is vendored (its `cache/`; complete with `.complete`)."""
    return vendor_root / "npm" / "bundles" / _deps_key("npm", *sorted(packages))


def vendor_python_deps(requirements: Path, client: Any, base_image: str, vendor_root: Path,
                       download: bool, log: Log) -> Path | None:
    """The wheel folder for these requirements: vendored already, or downloaded now (online)."""
    text = requirements.read_text()
    folder = pip_vendor_dir(requirements, vendor_root)
    if (folder / ".complete").is_file():
        return folder
    if not download:
        return None
    python = _image_python(client, base_image)
    if python is None:
        raise BuildError(f"deps.requirements: base_image {base_image} has no python3 to install them into")
    platforms: list[str] = []
    for minor in range(36, 16, -1):
        platforms += ["--platform", f"manylinux_2_{minor}_x86_64"]
    platforms += ["--platform", "manylinux2014_x86_64", "--platform", "manylinux1_x86_64"]
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=_ensure(folder.parent)))
    log(f"vendoring wheels for {requirements.name} (python {python}) into {folder}")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "-d", str(tmp),
         "--only-binary=:all:", *platforms, "--python-version", python, "--implementation", "cp",
         "--abi", "cp" + python.replace(".", ""), "-r", str(requirements)],
        capture_output=True, text=True,
    )
    if result.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        log(f"pip download failed (offline?); building with what {base_image} already has:\n"
            + result.stderr.strip()[-1500:])
        return None
    (tmp / "lock.txt").write_text("".join(f"{_file_sha256(p)}  {p.name}\n" for p in sorted(tmp.glob("*.whl"))))
    (tmp / ".complete").write_text(f"python={python}\n{text}")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder


def vendor_npm_deps(packages: list[str], vendor_root: Path, download: bool, log: Log) -> Path | None:
    """An npm cache holding these packages and everything they depend on."""
    folder = npm_vendor_dir(packages, vendor_root)
    if (folder / ".complete").is_file():
        return folder
    if not download:
        return None
    npm = shutil.which("npm")
    if npm is None:
        raise BuildError(f"deps.npm: vendoring {', '.join(packages)} needs npm on this machine "
                         f"(Debian: apt-get install npm), or copy a vendored {folder} here")
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=_ensure(folder.parent)))
    log(f"vendoring npm packages {' '.join(packages)} into {folder}")
    with tempfile.TemporaryDirectory() as prefix:
        result = subprocess.run([npm, "install", "--prefix", prefix, "--cache", str(tmp / "cache"), "--no-audit",
                                 "--no-fund", "--loglevel=error", *packages], capture_output=True, text=True)
    if result.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise BuildError(f"deps.npm: npm install {' '.join(packages)} failed:\n{result.stderr.strip()[-1500:]}\n"
                         f"    fix: run veri harness build once where the npm registry is reachable, "
                         f"then copy {folder} with the tree")
    (tmp / ".complete").write_text("\n".join(packages) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder


def _ensure(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


# --- the build ---------------------------------------------------------------------------------

def dockerfile(manifest: HarnessManifest, base_config: dict[str, Any], has_wheels: bool) -> str:
    lines = [f"FROM {manifest.base_image}", "USER root"]
    if manifest.deps.requirements:
        wheels = "--find-links /tmp/veri-wheels " if has_wheels else ""
        if has_wheels:
            lines.append("COPY wheels /tmp/veri-wheels")
        lines += [f"COPY bundle/{manifest.deps.requirements} /tmp/veri-requirements.txt",
                  f"RUN python3 -m pip install --no-cache-dir --no-index {wheels}-r /tmp/veri-requirements.txt"
                  " && rm -rf /tmp/veri-wheels /tmp/veri-requirements.txt"]
    if manifest.deps.npm:
        packages = " ".join(json.dumps(p) for p in manifest.deps.npm)
        lines += ["COPY npm-cache /tmp/veri-npm-cache",
                  "RUN command -v npm >/dev/null || { echo 'deps.npm: base_image has no npm' >&2; exit 1; }; "
                  f"npm install -g --offline --cache /tmp/veri-npm-cache --no-audit --no-fund {packages}"
                  " && rm -rf /tmp/veri-npm-cache"]
    lines += [
        f"COPY bundle {BUNDLE_MOUNT}",
        f"COPY --chown={HARNESS_UID}:{HARNESS_UID} output {OUTPUT_MOUNT}",
        f"WORKDIR {BUNDLE_MOUNT}",
        f"USER {HARNESS_UID}:{HARNESS_UID}",
    ]
    entry = base_config.get("Entrypoint") or []
    if entry and not any(Path(arg).name in INIT_PROGRAMS for arg in entry):
        lines.append("ENTRYPOINT []")  # the base's own entrypoint would swallow the harness's argv
    lines.append(f"CMD {json.dumps(manifest.entrypoint)}")
    return "\n".join(lines) + "\n"


def _normalized(info: tarfile.TarInfo, executable: bool = False) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mtime = 0
    if info.isdir():
        info.mode = 0o755
    elif info.isfile():
        info.mode = 0o755 if executable else 0o644
    return info


def _context(manifest: HarnessManifest, entries: list[BundleEntry], docker_text: str,
             wheels: Path | None, npm_cache: Path | None) -> tempfile.SpooledTemporaryFile:
    context = tempfile.SpooledTemporaryFile(max_size=64 << 20)
    with tarfile.open(fileobj=context, mode="w") as tar:
        data = docker_text.encode()
        info = _normalized(tarfile.TarInfo("Dockerfile"))
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for name in ("bundle", "output"):
            tar.addfile(_normalized(_dir_info(name)))
        for entry in entries:
            name = f"bundle/{entry.rel}"
            if entry.kind == "dir":
                tar.addfile(_normalized(_dir_info(name)))
            elif entry.kind == "symlink":
                info = _normalized(tarfile.TarInfo(name))
                info.type, info.linkname = tarfile.SYMTYPE, entry.target
                tar.addfile(info)
            else:
                info = _normalized(tar.gettarinfo(entry.path, arcname=name), entry.executable)
                with open(entry.path, "rb") as f:
                    tar.addfile(info, f)
        for folder, arcname in ((wheels, "wheels"), (npm_cache, "npm-cache")):
            if folder is not None:
                tar.add(folder, arcname=arcname, filter=lambda i: _normalized(i, bool(i.mode & 0o100)))
    context.seek(0)
    return context


def _dir_info(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    return info


def _base_fix(base_image: str) -> str:
    """What builds a missing base: veri's own by their make target (Claude Code's with its terms), yours by hand."""
    target = BASE_IMAGE_TARGETS.get(base_image)
    if target is None:
        by_target: dict[str, list[str]] = {}
        for image, builds in BASE_IMAGE_TARGETS.items():
            by_target.setdefault(builds, []).append(image)
        veris = ", ".join(f"`make {builds}` builds {' and '.join(images)}" for builds, images in by_target.items())
        return f"your own base: `make base-image NAME=... DOCKERFILE=...` or `docker load` it (veri's own: {veris})"
    terms = "; Claude Code: building it accepts Anthropic's terms, docs/licences.md" \
        if target == BASE_IMAGE_TARGETS["veri/base-claude-agent"] else ""
    return f"`make {target}` builds it (offline, from vendor/{terms})"


def build_bundle_image(bundle: Path, client: Any, *, prefix: str = "veri", vendor_root: Path | None = None,
                       download: bool = True, log: Log | None = None) -> str:
    """Build (or find) the bundle's image; returns its tag `<prefix>/harness-<name>:<hash>`."""
    import docker

    log = log or (lambda message: print(message, file=sys.stderr))
    bundle = Path(bundle).resolve()
    manifest = load_manifest(bundle)
    try:
        base = client.images.get(manifest.base_image)
    except docker.errors.ImageNotFound:
        raise BuildError(f"base_image = {manifest.base_image!r} is not an image on this machine\n    fix: "
                         + _base_fix(manifest.base_image)) from None
    entries = bundle_entries(bundle)
    digest = content_hash(entries, base.id)
    tag = f"{image_repository(manifest, prefix)}:{digest[:16]}"
    try:
        client.images.get(tag)
        log(f"{tag} is up to date")
        return tag
    except docker.errors.ImageNotFound:
        pass

    vendor_root = Path(vendor_root) if vendor_root else default_vendor_root()
    wheels = npm_cache = None
    if manifest.deps.requirements:
        wheels = vendor_python_deps(bundle / manifest.deps.requirements, client, manifest.base_image,
                                    vendor_root, download, log)
    if manifest.deps.npm:
        npm_folder = vendor_npm_deps(manifest.deps.npm, vendor_root, download, log)
        if npm_folder is None:
            raise BuildError(f"deps.npm: no vendored npm cache for {', '.join(manifest.deps.npm)} under "
                             f"{vendor_root / 'npm' / 'bundles'}\n    fix: run veri harness build once where "
                             "the npm registry is reachable, then copy vendor/ with the tree")
        npm_cache = npm_folder / "cache"
    text = dockerfile(manifest, base.attrs.get("Config") or {}, wheels is not None)
    labels = {LABEL_BUNDLE: manifest.name, LABEL_HASH: digest, "org.veri.protocol": manifest.protocol,
              LABEL_EGRESS: json.dumps(manifest.egress)}  # the launcher enforces it
    log(f"building {tag} from {bundle} (FROM {manifest.base_image})")
    lines: list[str] = []
    with _context(manifest, entries, text, wheels, npm_cache) as context:
        try:
            for chunk in client.api.build(fileobj=context, custom_context=True, tag=tag, rm=True, forcerm=True,
                                          pull=False, network_mode="none", labels=labels, decode=True):
                if "stream" in chunk:
                    lines.extend(chunk["stream"].rstrip("\n").splitlines())
                if "error" in chunk:
                    raise BuildError(_build_failure(tag, manifest, lines, chunk["error"], wheels, vendor_root))
        except docker.errors.APIError as exc:
            raise BuildError(_build_failure(tag, manifest, lines, str(exc), wheels, vendor_root)) from exc
    log(f"built {tag}")
    return tag


def _build_failure(tag: str, manifest: HarnessManifest, lines: list[str], error: str, wheels: Path | None,
                   vendor_root: Path) -> str:
    tail = "\n".join(lines[-30:])
    message = f"building {tag} failed: {error.strip()}\n{tail}"
    if manifest.deps.requirements and "pip install" in tail and ("No matching distribution" in tail
                                                                  or "Could not find a version" in tail):
        message += (f"\n    fix: deps.requirements names packages {manifest.base_image} lacks and no wheels are "
                    f"vendored{'' if wheels is None else ' for all of them'}: run veri harness build once "
                    f"online (it fills {vendor_root / 'wheels' / 'bundles'}), then copy vendor/ with the tree")
    return message
