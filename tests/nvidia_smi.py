"""A stand-in `nvidia-smi` for tests: put it on PATH and the planner, `veri doctor` and bench/gpu_check.sh
see the GPUs it describes (count, model, memory, driver, compute capability, MIG) with no GPU present.

It answers what veri asks: `--query-gpu=FIELD,... --format=csv[,noheader][,nounits]` and `-L`."""

from __future__ import annotations

import json
import stat
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

# What nvidia-smi reports as memory.total (MiB) for the GPUs the tests name by their marketing size.
MEMORY_MIB = {24: 23034, 48: 46068, 80: 81559, 141: 143771}
NAMES = {24: "NVIDIA L4", 48: "NVIDIA L40S", 80: "NVIDIA H100 80GB HBM3", 141: "NVIDIA H200"}

_SCRIPT = '''#!{python}
import json, sys
gpus = json.loads({gpus!r})
args = sys.argv[1:]
if args[:1] == ["-L"]:
    for gpu in gpus:
        print(f"GPU {{gpu['index']}}: {{gpu['name']}} (UUID: GPU-{{gpu['index']:08d}})")
    sys.exit(0)
query = next((a.split("=", 1)[1] for a in args if a.startswith("--query-gpu=")), None)
form = next((a.split("=", 1)[1] for a in args if a.startswith("--format=")), "")
if query is None:
    print("stand-in nvidia-smi: only --query-gpu and -L", file=sys.stderr)
    sys.exit(2)
units = {{"memory.total": " MiB", "memory.used": " MiB", "memory.free": " MiB"}}
fields = query.split(",")
if "noheader" not in form:
    print(", ".join(fields))
for gpu in gpus:
    values = []
    for field in fields:
        if field not in gpu:
            print(f"Field \\"{{field}}\\" is not a valid field to query.", file=sys.stderr)
            sys.exit(2)
        value = str(gpu[field])
        values.append(value if "nounits" in form else value + units.get(field, ""))
    print(", ".join(values))
'''


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory_mib: int
    driver: str = "580.82.07"
    compute_cap: str = "9.0"
    mig: str = "Disabled"

    def fields(self) -> dict[str, object]:
        return {"index": self.index, "name": self.name, "memory.total": self.memory_mib, "memory.used": 0,
                "memory.free": self.memory_mib, "driver_version": self.driver, "compute_cap": self.compute_cap,
                "mig.mode.current": self.mig, "uuid": f"GPU-{self.index:08d}"}


def gpus(count: int, size_gb: int = 80, *, driver: str = "580.82.07", compute_cap: str = "9.0",
         mig: str = "Disabled") -> list[Gpu]:
    return [Gpu(index, NAMES[size_gb], MEMORY_MIB[size_gb], driver, compute_cap, mig) for index in range(count)]


def install(folder: Path, devices: list[Gpu]) -> Path:
    """Write `folder/nvidia-smi` answering for `devices`; returns the folder (to put first on PATH)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "nvidia-smi"
    payload = json.dumps([device.fields() for device in devices])
    script.write_text(_SCRIPT.format(python=sys.executable, gpus=payload))
    script.chmod(script.stat().st_mode | stat.S_IEXEC | stat.S_IXGRP | stat.S_IXOTH)
    return folder


def describe(devices: list[Gpu]) -> str:
    return json.dumps([asdict(device) for device in devices])
