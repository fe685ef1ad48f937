"""veri/vllm-cpu (= veri/trainer-cpu), the GPU path's stack on CPU: what it holds is what the pins say.

`make images-vllm-cpu` builds it (`make test` does); without it, or without a Docker daemon, these tests
skip and say so, except under CI (CI=true) or VERI_REQUIRE_SANDBOX=1, where that is a failure. The
containers run with no network, under docker's default runtime.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import docker
import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tests.sandbox.conftest import unavailable

ROOT = Path(__file__).resolve().parents[2]
PINS = ROOT / "services" / "veri" / "gpu" / "stack" / "gpu-stack.txt"
PREFIX = os.environ.get("IMAGE_PREFIX", "veri")
IMAGE = f"{PREFIX}/vllm-cpu"
TRAINER = f"{PREFIX}/trainer-cpu"

pytestmark = [pytest.mark.needs("vllm"), pytest.mark.slow]


@pytest.fixture(scope="module")
def client():
    try:
        client = docker.from_env(timeout=300)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure here means "no daemon"
        unavailable(f"no Docker daemon ({exc}); run `make docker`")
    try:
        client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        unavailable(f"image {IMAGE} is missing; run `make images-vllm-cpu` (not part of `make images`)")
    yield client
    client.close()


def run(client, *command: str) -> str:
    """The command's stdout+stderr in a throwaway container of the image (no network)."""
    output = client.containers.run(IMAGE, list(command), remove=True, network_disabled=True,
                                   stdout=True, stderr=True)
    return output.decode()


def pins() -> dict[str, Requirement]:
    lines = (line.split("#", 1)[0].strip() for line in PINS.read_text().splitlines())
    return {(req := Requirement(line)).name: req for line in lines if line}


def test_the_image_holds_the_pinned_versions(client):
    wanted = pins()
    script = ("import importlib.metadata as m, json, sys; "
              "print(json.dumps({p: m.version(p) for p in sys.argv[1:]}))")
    found = json.loads(run(client, "python3", "-c", script, *wanted).strip().splitlines()[-1])
    # A local build tag (+cpu) is fine: the public version is what must agree with the GPU images.
    wrong = {name: found[name] for name, req in wanted.items()
             if not req.specifier.contains(Version(found[name]).public, prereleases=True)}
    assert wrong == {}, f"outside {PINS.relative_to(ROOT)}: {wrong}"
    assert found["vllm"].endswith("+cpu")  # the alias dist-info of vllm-cpu

    # The trainer's own check (what `veri train` runs before a vLLM job) passes inside the image.
    check = "from veri.services.trainer.gpu_stack import gpu_stack_problems; print(gpu_stack_problems())"
    assert run(client, "python3", "-c", check).strip().splitlines()[-1] == "[]"


def test_veri_train_runs(client):
    assert "usage: veri train" in run(client, "veri", "train", "--help")


def test_no_cuda_inside(client):
    script = ("import importlib.metadata as m, json, torch; print(json.dumps({'torch': torch.__version__, "
              "'cuda': torch.version.cuda, 'available': torch.cuda.is_available(), "
              "'nvidia': sorted(d.metadata['Name'] for d in m.distributions() "
              "if d.metadata['Name'].lower().startswith(('nvidia', 'triton')))}))")
    found = json.loads(run(client, "python3", "-c", script).strip().splitlines()[-1])
    assert found == {"torch": found["torch"], "cuda": None, "available": False, "nvidia": []}
    assert found["torch"].endswith("+cpu")


def test_the_trainer_tag_is_the_same_image(client):
    try:
        trainer = client.images.get(TRAINER)
    except docker.errors.ImageNotFound:
        pytest.fail(f"{IMAGE} exists but {TRAINER} does not: `make images-vllm-cpu` tags both")
    assert trainer.id == client.images.get(IMAGE).id


def test_the_image_carries_veris_licence(client):
    """veri's code is in it: its LICENSE, and what the image carries under which licences (docs/licences.md)."""
    found = run(client, "sh", "-c", "cmp /usr/share/doc/veri/LICENSE /src/LICENSE && sha256sum /src/LICENSE"
                " && head -1 /usr/share/doc/veri/licences.md")
    assert found.split() == [hashlib.sha256((ROOT / "LICENSE").read_bytes()).hexdigest(), "/src/LICENSE", "#",
                             "Licences"], found
