"""The verifier's tools, offline (docs/design/harbor-tasks.md §3.3): a tree mounted read-only at /veri/tools

  bin/uv, bin/uvx         static (PyPI's `uv` musllinux wheel): they run in any image
  wheels/                 the wheels the tasks' test.sh lines name (`veri tasks vendor`)
  shims/apt-get curl wget first on PATH: `apt-get update` a no-op, `apt-get install` of what the image has
                          succeeds, the uv installer URL answered by uv-install.sh, anything else fails named
  uv-install.sh           links the vendored uv into $HOME/.local/bin and writes the `env` file test.sh sources

and the variables the verifier runs test.sh with (verifier_env), so an unmodified cookbook test.sh
(`curl -LsSf https://astral.sh/uv/.../install.sh | sh; uvx --with pytest==X pytest ...`) runs offline."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import zipfile
from pathlib import Path

from veri.tools.tasks.layout import RUNTIME_MOUNT, TOOLS_MOUNT, default_build_dir

SHIMS = Path(__file__).resolve().parent / "shims"
TOOLS_VERSION = "1"  # bump when the tree's layout changes


class VerifierToolsError(RuntimeError):
    """The verifier's tools are not vendored; the message says how to vendor them."""


def _uv_wheel(vendor: Path) -> Path:
    wheels = sorted((vendor / "verifier" / "uv").glob("uv-*musllinux*x86_64.whl"))
    if not wheels:
        raise VerifierToolsError(f"no uv musllinux wheel under {vendor / 'verifier' / 'uv'}: run `veri tasks vendor "
                                 "TASK...` on a machine with network")
    return wheels[-1]


def _inputs_hash(vendor: Path) -> str:
    digest = hashlib.sha256(f"tools {TOOLS_VERSION}\n".encode())
    for path in [_uv_wheel(vendor), *sorted((vendor / "verifier" / "wheels").glob("*.whl")), *sorted(SHIMS.iterdir())]:
        digest.update(f"{path.name} {path.stat().st_size}\n".encode())
        if path.parent == SHIMS:
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def verifier_tools(vendor: Path, *, build_dir: Path | None = None) -> Path:
    """The /veri/tools tree for the wheels vendored under vendor (vendor/tasks/), built once per set."""
    out = (build_dir or default_build_dir()) / "tools" / _inputs_hash(vendor)
    if (out / ".complete").is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        (work / "bin").mkdir()
        with zipfile.ZipFile(_uv_wheel(vendor)) as wheel:
            for member in wheel.namelist():
                name = member.rsplit("/", 1)[-1]
                if "/scripts/" in member and name in ("uv", "uvx"):
                    (work / "bin" / name).write_bytes(wheel.read(member))
                    (work / "bin" / name).chmod(0o755)
        if not (work / "bin" / "uv").is_file():
            raise VerifierToolsError(f"{_uv_wheel(vendor)} holds no uv binary: vendor it again")
        shutil.copytree(vendor / "verifier" / "wheels", work / "wheels")
        (work / "shims").mkdir()
        for shim in ("apt-get", "curl", "wget"):
            shutil.copy2(SHIMS / shim, work / "shims" / shim)
        shutil.copy2(SHIMS / "uv-install.sh", work / "uv-install.sh")
        (work / ".complete").write_text("")
        work.chmod(0o755)
        if (out / ".complete").is_file():  # another build of the same inputs finished first: keep its tree
            return out
        if out.exists():
            shutil.rmtree(out)
        work.rename(out)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return out


def verifier_env(image_path: str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", *,
                 scratch: str = "/veri/verify") -> dict[str, str]:
    """The variables test.sh runs with: veri's shims and uv first on PATH (then the image's own PATH),
    uv and pip offline on the vendored wheels, with veri's Python (the runtime tree's: the same in every
    task, and one the agent cannot replace), HOME and the uv cache in the verifier's private scratch
    folder, and a `uv.toml` the agent planted ignored."""
    return {
        "PATH": f"{TOOLS_MOUNT}/shims:{TOOLS_MOUNT}/bin:{image_path}",
        "HOME": f"{scratch}/home",
        "UV_OFFLINE": "1",
        "UV_NO_CONFIG": "1",
        "UV_FIND_LINKS": f"{TOOLS_MOUNT}/wheels",
        "UV_PYTHON": f"{RUNTIME_MOUNT}/bin/python3",
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_CACHE_DIR": f"{scratch}/uv-cache",
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": f"{TOOLS_MOUNT}/wheels",
        "DEBIAN_FRONTEND": "noninteractive",
    }
