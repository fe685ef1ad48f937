"""`veri stack-env CONFIG`: the compose stack's settings a job needs, as shell assignments.

`make train` evaluates them before `make up`, so the policy serves the job's model and the proxy
samples with the job's settings (the trainer must know what was sampled; nothing is sent per call).

`--name JOB` also hands the trainer container a copy of the job file (`stage_job_file`): the user keeps it
wherever they like (a home folder the container's user cannot read, say), the container reads
<state>/configs/JOB.yaml, with the job's paths as the container sees them (VERI_JOB_FILE).

`backend: vllm` plans the layout here, once, before anything starts (`JobConfig.gpu_layout`: this
machine's GPUs, or the CPU twin with `device: cpu`), writes the vLLM services for that plan to
<state>/compose.policy.yaml (`policy_compose`) and points COMPOSE_FILE at it; the plan reaches the
trainer container as VERI_GPU_PLAN, which the trainer reads instead of planning again.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from veri.core import envs
from veri.core.config import JobConfig
from veri.core.state import STATE_IN_CHECKOUT
from veri.core.state import state_dir as default_state_dir
from veri.gpu.job import plan_job

if TYPE_CHECKING:
    from veri.tools.appliance.policy_compose import Least

BASE_COMPOSE_FILE = "compose.yaml"
# the checkout's (an editable install: `make train` runs stack-env from it)
BASE_COMPOSE_PATH = Path(__file__).resolve().parents[4] / BASE_COMPOSE_FILE
OVERRIDE_FILE = "compose.policy.yaml"
MODELS_IN_CONTAINERS = Path("/models")  # compose.yaml mounts VERI_MODELS_DIR there
# The trainer container (compose.yaml): the checkout at /work, its working folder, and <state>/configs.
CHECKOUT_IN_TRAINER = Path("/work")
JOB_FILES = "configs"
JOB_FILES_IN_TRAINER = Path("/state") / JOB_FILES


def register(commands: argparse._SubParsersAction) -> None:
    command = commands.add_parser("stack-env", help="shell assignments that point the stack at a job's config")
    command.add_argument("config", type=Path, help="job file (.yaml or .toml)")
    command.add_argument("--state", type=Path, default=None,
                         help=f"the stack's state folder (default ${envs.VERI_STATE_DIR},"
                              f" else the checkout's {STATE_IN_CHECKOUT})")
    command.add_argument("--model-only", action="store_true",
                         help="only where the job's model lives (VERI_MODELS_DIR, VERI_MODEL): no plan, no file")
    command.add_argument("--name", default=None, metavar="JOB",
                         help=f"also copy the job file to <state>/{JOB_FILES}/JOB.yaml for the trainer container"
                              f" ({envs.VERI_JOB_FILE}: its path there)")
    command.set_defaults(func=_print)


def stack_env(config_path: Path, state_dir: Path | None = None, *, model_only: bool = False,
              name: str | None = None) -> dict[str, str]:
    """The assignments; for `backend: vllm` also writes the policy's compose override into the state folder.
    `model_only`: just the model's place (`make train` builds veri's own models before the plan reads them).
    `name`: also the trainer's copy of the job file (`stage_job_file`)."""
    from veri.core.config import Backend, parse_config, read_config_file

    config = parse_config(read_config_file(config_path))  # structure only: the model may not exist yet
    model = config.model.resolve()
    where = {"VERI_MODELS_DIR": str(model.parent), "VERI_MODEL": model.name}
    if model_only:
        return where
    values = {
        **where,
        "VERI_TEMPERATURE": repr(config.sampling.temperature),
        "VERI_TOP_P": repr(config.sampling.top_p),
        "VERI_MAX_TOKENS": str(config.max_tokens_per_call),
        "VERI_HOSTED_TOOLS": str(config.hosted_tools),
        # empty when none: what compose defaults to, so a running stack is not recreated for it
        "VERI_CHAT_TEMPLATE_KWARGS": json.dumps(config.chat_template_kwargs) if config.chat_template_kwargs else "",
        "VERI_BUNDLE": str(config.harness_bundle),
        envs.VERI_BUNDLE_BASE_TARGET: _base_target(config.harness_bundle),
        "VERI_POLICY_BACKEND": str(config.backend),
        "COMPOSE_FILE": BASE_COMPOSE_FILE,
        envs.VERI_POLICY_URLS: "",  # compose.yaml's default: the hf policy
        envs.VERI_POLICY_DP_RANKS: "",
    }
    if name is not None:
        values[envs.VERI_JOB_FILE] = str(stage_job_file(config, name, _state_dir(state_dir)))
    if config.backend == Backend.VLLM:
        values |= _vllm_stack(config, _state_dir(state_dir), model)
    return values


def _base_target(bundle: Path) -> str:
    """The make target that builds the bundle's base image when it is one of veri's ("" for your own, or a bundle
    whose manifest does not load: `veri validate`, next in make train, names its problem)."""
    from veri.core.harness import BASE_IMAGE_TARGETS, ManifestError, load_manifest

    try:
        return BASE_IMAGE_TARGETS.get(load_manifest(bundle).base_image, "")
    except ManifestError:
        return ""


def stage_job_file(config: JobConfig, name: str, state_dir: Path, checkout: Path = BASE_COMPOSE_PATH.parent) -> Path:
    """<state>/configs/<name>.yaml: the job as the trainer container reads it, readable by its user whatever
    the original's folder and modes. Paths in the checkout become relative ones (the container's working
    folder is the checkout), the model /models/<its folder> (VERI_MODELS_DIR is mounted there); a path
    outside the checkout is refused, as the container cannot see it. Returns the copy's path in the container."""
    import yaml

    from veri.core.config import map_paths
    from veri.core.problems import Problem, ProblemsError

    if not name or Path(name).name != name or name.startswith("."):
        raise ProblemsError("--name", [Problem("", f"{name!r} is not a job name", "give a folder name (no /)")])
    checkout = checkout.resolve()
    outside: list[Problem] = []

    def in_container(where: str, path: Path) -> Path:
        if where == "model":
            return MODELS_IN_CONTAINERS / path.name
        if path.resolve().is_relative_to(checkout):
            return path.resolve().relative_to(checkout)
        outside.append(Problem(where, f"{path} is outside the checkout {checkout}, the one folder the trainer"
                                      " container sees", f"move it into the checkout (config/ holds the shipped"
                                      f" jobs' files) and point `{where}` there"))
        return path

    staged = map_paths(config, in_container)
    if outside:
        raise ProblemsError("the job file", outside)
    folder = state_dir / JOB_FILES
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)  # the state folder itself is 0700: the trainer reaches this one through its own mount
    copy = folder / f"{name}.yaml"
    text = yaml.safe_dump(staged.model_dump(mode="json", exclude_unset=True), sort_keys=False)
    temporary = folder / f".{name}.yaml.tmp"
    temporary.write_text(f"# {name}: the trainer's copy of a job file (veri stack-env --name); edit the original\n"
                         + text, encoding="utf-8")
    temporary.chmod(0o644)
    temporary.replace(copy)
    return JOB_FILES_IN_TRAINER / copy.name


def _vllm_stack(config: JobConfig, state_dir: Path, model: Path) -> dict[str, str]:
    from veri.gpu.planner import PolicyDevice, model_facts
    from veri.tools.appliance.doctor.job import image_prefix
    from veri.tools.appliance.policy_compose import compose_override, dump, images_for, policy_urls

    plan = plan_job(config)
    override = compose_override(plan, model=str(MODELS_IN_CONTAINERS / model.name),
                                images=images_for(plan, image_prefix()), least=least_privilege(),
                                max_model_len=config.max_model_len,
                                weights_gib=model_facts(model).weight_gib)
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / OVERRIDE_FILE
    path.write_text(dump(override))
    print(f"veri stack-env: {plan.describe()}\n(compose services: {path})", file=sys.stderr)
    # vLLM's own DP: one URL, ranks pinned by header; the CPU twin: one server (URL) per replica.
    ranks = plan.data_parallel_size if plan.device == PolicyDevice.CUDA else 1
    return {
        "COMPOSE_FILE": f"{BASE_COMPOSE_FILE}:{path}",
        envs.VERI_POLICY_URLS: ",".join(policy_urls(plan)),
        envs.VERI_POLICY_DP_RANKS: str(ranks),
        envs.VERI_GPU_PLAN: plan.to_json(),
    }


def least_privilege(compose_file: Path = BASE_COMPOSE_PATH) -> Least:
    """What compose.yaml's `policy` holds of its x-least (declared there once; its /tmp executable) and
    x-least-env, for the vLLM servers generated here."""
    import yaml

    from veri.tools.appliance.policy_compose import Least

    compose = yaml.safe_load(compose_file.read_text())
    policy = compose["services"]["policy"]
    return Least(service={key: policy[key] for key in compose["x-least"]}, environment=dict(compose["x-least-env"]))


def _state_dir(given: Path | None) -> Path:
    return (given or default_state_dir()).resolve()


def _print(args: argparse.Namespace) -> int:
    from veri.core.problems import ProblemsError
    from veri.gpu.planner import LayoutError

    try:
        values = stack_env(args.config, args.state, model_only=args.model_only, name=args.name)
    except ProblemsError as error:
        print(error, file=sys.stderr)
        return 1
    except LayoutError as error:
        print(f"veri stack-env: {error}", file=sys.stderr)
        return 1
    for key, value in values.items():
        print(f"export {key}={shlex.quote(value)}")
    return 0
