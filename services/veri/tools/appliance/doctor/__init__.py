"""`veri doctor [CONFIG]`: each fact of this host that decides a first run, pass / fail, with the fix.

    GPUs (nvidia-smi on PATH: count, memory, compute capability, MIG) and the driver, against what the
    images' CUDA 13 build needs (gpus.py); a short container with compose's GPU device request
    (host.py); docker + runsc, disk, /dev/shm (host.py); the images and the job's model folder and plan
    (job.py). On a box without a GPU it says so, and that the CPU path is the one available; a job that does
    not say `backend:` there gets the refusal `veri validate` gives (JobConfig.unsaid_backend).

`make doctor [CONFIG=...]` runs it; `make train` runs it first and stops on a failure (exit 1). Every
fact is read from the machine as it is: tests put a stand-in nvidia-smi on PATH.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from veri.tools.appliance.doctor import gpus, host, job
from veri.tools.appliance.doctor.facts import Fact, Status, render

REPO = Path(__file__).resolve().parents[5]


def register(commands: argparse._SubParsersAction) -> None:
    command = commands.add_parser("doctor", help="check the host's facts that decide a first run, each with its fix")
    command.add_argument("config", type=Path, nargs="?", default=None,
                         help="a job file: also its images, model folder and plan on this box")
    command.add_argument("--no-container-probe", action="store_true",
                         help="skip the short docker run that checks a container gets the GPUs")
    command.add_argument("--quiet", action="store_true", help="only what fails or warns, and the verdict")
    command.add_argument("--json", action="store_true", help="the facts as JSON")
    command.set_defaults(func=_run)


def diagnose(config_path: Path | None, *, container_probe: bool = True, repo: Path = REPO) -> list[Fact]:
    config, facts = _job(config_path)
    try:
        found, error = gpus.read_gpus(), None
    except gpus.SmiError as failure:
        found, error = None, str(failure)
    inventory = _inventory(found)
    # A job that does not say `backend:` on a box with no NVIDIA GPU: validate's refusal, not "needs GPUs".
    unsaid = job.backend_fact(config, inventory)
    facts += [unsaid] if unsaid else []
    needs_gpus = job.gpu_job(config) and unsaid is None
    facts += gpus.gpu_facts(found, gpu_job=needs_gpus, error=error)
    client = host.docker_client()
    facts += host.docker_facts(client)
    if found:
        ids = [gpu.index for gpu in found]
        image = next((tag for tag in (f"{job.image_prefix()}/{name}" for name in ("vllm", "runtime", "os-base"))
                      if job.present(client, tag) is not None), None)
        facts.append(host.gpu_container_fact(client, image, ids) if container_probe
                     else Fact("GPU in a container", Status.INFO, "not probed (--no-container-probe)"))
    docker_root = client.info().get("DockerRootDir") if client is not None else None
    images = job.image_facts(client, config, repo, needs_gpus=needs_gpus, backend_unsaid=unsaid is not None)
    missing = needs_gpus and images[0].status == Status.FAIL and "no " in images[0].found
    facts.append(host.disk_fact(repo, docker_root, gpu_images_missing=missing))
    facts.append(host.shm_fact(gpus=len(found or [])))
    facts += images
    facts.append(job.model_fact(config))
    plan = job.plan_fact(config, inventory)
    return facts + ([plan] if plan else [])


def _job(path: Path | None) -> tuple[job.JobConfig | None, list[Fact]]:
    if path is None:
        return None, []
    from veri.core.config import parse_config, read_config_file
    from veri.core.problems import ProblemsError

    try:
        return parse_config(read_config_file(path)), []
    except ProblemsError as error:
        return None, [Fact("job file", Status.FAIL, f"{path}: {error}", f"veri validate {path} lists every problem")]


def _inventory(found: list[gpus.Gpu] | None) -> job.GpuInventory | None:
    from veri.gpu.planner import probe_gpus

    return probe_gpus() if found else None  # the planner's own reading (CUDA_VISIBLE_DEVICES honoured)


def _run(args: argparse.Namespace) -> int:
    where = f" (job: {args.config})" if args.config else ""
    facts = diagnose(args.config, container_probe=not args.no_container_probe)
    if args.json:
        print(json.dumps([asdict(fact) for fact in facts], indent=2))
    elif args.quiet:
        print(render([fact for fact in facts if fact.status in (Status.FAIL, Status.WARN)], verdict_of=facts))
    else:
        print(f"veri doctor: the facts that decide a first run on this host{where}")
        print(render(facts))
    return 1 if any(fact.status == Status.FAIL for fact in facts) else 0


__all__ = ["diagnose", "register"]
