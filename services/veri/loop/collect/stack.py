"""What every command that runs rollouts through the stack builds the same way (`veri train`,
`veri eval`): the stack's options, the runner that starts sandboxes, the launch settings of a job's
harness, and the checks that the services answer and that the proxy samples as the command assumes.
Here, so neither command imports the other's internals."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import httpx
from pydantic import ValidationError

from veri.core import sampling
from veri.core.config import JobConfig
from veri.loop.collect.collect import LaunchSettings
from veri.loop.collect.errors import StackError
from veri.loop.collect.runner import BackendRunner, RolloutRunner, launcher_runner, sandbox_backend
from veri.services.launcher.errors import LauncherError
from veri.services.proxy.control_client import ControlClient


class StackOptions(Protocol):
    """Where the stack is and how sandboxes start (`TrainOptions` is one)."""

    proxy_url: str
    policy_urls: list[str]
    job_name: str
    sandbox: str  # local | docker (in this process) | launcher (the launcher service)
    image: str | None
    launcher_url: str | None
    control_token: str | None
    harbor_tasks: dict[str, dict[str, Any]]  # a Harbor dataset's tasks, resolved at the command's start


def rollout_runner(options: StackOptions, outputs: Path) -> RolloutRunner:
    """The runner of `options.sandbox`; in-process backends collect outputs under `outputs`."""
    if options.sandbox == "launcher":
        if not options.launcher_url:
            raise StackError("--sandbox launcher needs --launcher-url")
        return launcher_runner(options.launcher_url, token=options.control_token, subdir=options.job_name)
    try:
        return BackendRunner(sandbox_backend(options.sandbox), outputs)
    except (ImportError, LauncherError) as error:  # no Docker SDK / daemon / gVisor: the backend says what to do
        raise StackError(f"sandbox {options.sandbox!r} unavailable: {error}") from error


def launch_settings(config: JobConfig, options: StackOptions) -> LaunchSettings:
    if options.sandbox == "local":
        image = str(config.harness_bundle)  # the local backend runs the bundle folder itself
    elif options.image:
        image = options.image
    else:
        raise StackError(f"--sandbox {options.sandbox} needs --image: the harness bundle's image (veri harness build)")
    return LaunchSettings(
        image=image, model_name=config.model.name, max_turns=config.max_turns, timeout_s=config.harness_timeout_s,
        max_parallel=config.max_parallel_rollouts, labels={"job": options.job_name},
        harbor_tasks=dict(options.harbor_tasks),
    )


def check_reachable(options: StackOptions) -> None:
    for name, url in (("capture proxy", options.proxy_url), *(("policy server", url) for url in options.policy_urls)):
        try:
            httpx.get(f"{url.rstrip('/')}/health", timeout=10).raise_for_status()
        except httpx.HTTPError as error:
            raise StackError(f"the {name} at {url} is not reachable ({error}): start it first"
                             f" (or pass its URL: --{'proxy' if 'proxy' in name else 'policy'}-url)") from error


def check_sampling(options: StackOptions, config: JobConfig, *, temperature: float | None = None) -> None:
    """The proxy samples with its own settings, the job's when the stack started (core/sampling.py): a reused
    stack or a `--proxy-url` with others would have every span scored against the wrong distribution.
    `temperature`: what the command samples at when it is not the job's (`veri eval --temperature`)."""
    try:
        served = ControlClient(options.proxy_url, token=options.control_token).capture_config()
    except ValidationError as error:  # it answered, but not as veri's proxy does
        raise StackError(f"the service at {options.proxy_url} does not say how it samples (GET /control/config:"
                         f" {error.errors()[0]['msg']}): point --proxy-url at veri's capture proxy") from error
    wanted = config.sampling.temperature if temperature is None else temperature
    wrong = sampling.differences(served, temperature=wanted, top_p=config.sampling.top_p,
                                 max_tokens=config.max_tokens_per_call)
    if not wrong:
        return
    flags = f"--temperature {wanted:g} --top-p {config.sampling.top_p:g} --max-tokens {config.max_tokens_per_call}"
    other = f", or pass --temperature {served.temperature:g}" if temperature is not None else ""
    raise StackError(f"the capture proxy samples with {', '.join(wrong)}, not as this job does: bring the stack up"
                     f" with this job (`make down`, then `make train` or `make eval` with its CONFIG), or start the"
                     f" proxy with {flags}"
                     f"{other}")
