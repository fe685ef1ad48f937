"""`veri stack-env CONFIG`: the compose stack's settings a job needs, as shell assignments.

`make train` evaluates them before `make up`, so the policy serves the job's model and the proxy
samples with the job's settings (the trainer must know what was sampled; nothing is sent per call).

`backend: vllm` plans the layout here, once, before anything starts (`JobConfig.gpu_layout`: this
machine's GPUs, or the CPU twin with `device: cpu`), writes the vLLM services for that plan to
<state>/compose.policy.yaml (`policy_compose`) and points COMPOSE_FILE at it; the plan reaches the
trainer container as VERI_GPU_PLAN, which the trainer reads instead of planning again.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from veri.core import envs
from veri.core.config import JobConfig

if TYPE_CHECKING:
    from veri.appliance.policy_compose import Least

BASE_COMPOSE_FILE = "compose.yaml"
# the checkout's (an editable install: `make train` runs stack-env from it)
BASE_COMPOSE_PATH = Path(__file__).resolve().parents[3] / BASE_COMPOSE_FILE
OVERRIDE_FILE = "compose.policy.yaml"
MODELS_IN_CONTAINERS = Path("/models")  # compose.yaml mounts VERI_MODELS_DIR there


def register(commands: argparse._SubParsersAction) -> None:
    command = commands.add_parser("stack-env", help="shell assignments that point the stack at a job's config")
    command.add_argument("config", type=Path)
    command.add_argument("--state", type=Path, default=None,
                         help=f"the stack's state folder (default ${envs.VERI_STATE_DIR} or build/state)")
    command.add_argument("--model-only", action="store_true",
                         help="only where the job's model lives (VERI_MODELS_DIR, VERI_MODEL): no plan, no file")
    command.set_defaults(func=_print)


def stack_env(config_path: Path, state_dir: Path | None = None, *, model_only: bool = False) -> dict[str, str]:
    """The assignments; for `backend: vllm` also writes the policy's compose override into the state folder.
    `model_only`: just the model's place (`make train` builds veri's own models before the plan reads them)."""
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
        "VERI_POLICY_BACKEND": str(config.backend),
        "COMPOSE_FILE": BASE_COMPOSE_FILE,
        envs.VERI_POLICY_URLS: "",  # compose.yaml's default: the hf policy
        envs.VERI_POLICY_DP_RANKS: "",
    }
    if config.backend == Backend.VLLM:
        values |= _vllm_stack(config, _state_dir(state_dir), model)
    return values


def _vllm_stack(config: JobConfig, state_dir: Path, model: Path) -> dict[str, str]:
    from veri.appliance.doctor.job import image_prefix
    from veri.appliance.policy_compose import compose_override, dump, images_for, policy_urls
    from veri.core.layout import PolicyDevice, model_facts

    plan = config.gpu_layout()
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

    from veri.appliance.policy_compose import Least

    compose = yaml.safe_load(compose_file.read_text())
    policy = compose["services"]["policy"]
    return Least(service={key: policy[key] for key in compose["x-least"]}, environment=dict(compose["x-least-env"]))


def _state_dir(given: Path | None) -> Path:
    return (given or Path(os.environ.get(envs.VERI_STATE_DIR) or "build/state")).resolve()


def _print(args: argparse.Namespace) -> int:
    from veri.core.layout import LayoutError
    from veri.core.problems import ProblemsError

    try:
        values = stack_env(args.config, args.state, model_only=args.model_only)
    except ProblemsError as error:
        print(error, file=sys.stderr)
        return 1
    except LayoutError as error:
        print(f"veri stack-env: {error}", file=sys.stderr)
        return 1
    for key, value in values.items():
        print(f"export {key}={shlex.quote(value)}")
    return 0
