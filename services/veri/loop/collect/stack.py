"""What every command that runs rollouts through the stack builds the same way (`veri train`,
`veri eval`): the stack's options, the runner that starts sandboxes, the launch settings of a job's
harness, and the check that the services answer. Here, so neither command imports the other's internals."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import httpx

from veri.core.config import JobConfig
from veri.loop.collect.collect import LaunchSettings
from veri.loop.collect.errors import StackError
from veri.loop.collect.runner import BackendRunner, RolloutRunner, launcher_runner, sandbox_backend
from veri.services.launcher.errors import LauncherError


class StackOptions(Protocol):
    """Where the stack is and how sandboxes start (`TrainOptions` is one)."""

    proxy_url: str
    policy_urls: list[str]
    job_name: str
    sandbox: str  # local | docker (in this process) | launcher (the launcher service)
    image: str | None
    launcher_url: str | None
    control_token: str | None


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
    )


def check_reachable(options: StackOptions) -> None:
    for name, url in (("capture proxy", options.proxy_url), *(("policy server", url) for url in options.policy_urls)):
        try:
            httpx.get(f"{url.rstrip('/')}/health", timeout=10).raise_for_status()
        except httpx.HTTPError as error:
            raise StackError(f"the {name} at {url} is not reachable ({error}): start it first"
                             f" (or pass its URL: --{'proxy' if 'proxy' in name else 'policy'}-url)") from error
