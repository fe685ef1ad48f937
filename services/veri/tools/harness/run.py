"""`veri run-harness`: run a harness bundle N times against the current policy, without training.

The first thing a user does with a new harness: see the captured spans, the episode the trainer
would build, the verdicts and (given a job config) the reward. Records are written in the archive's
trajectory format, so `veri debug` reads them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from veri.core import envs
from veri.core.harbor_task import TASK_DIR_COLUMN
from veri.core.harness import load_manifest
from veri.core.launch import GroupLaunch, LaunchResult, SandboxLimits
from veri.core.rollout_record import RolloutRecord
from veri.core.state import state_dir
from veri.loop.collect.collect import CollectedRollout, GroupCollector, LaunchSettings
from veri.loop.collect.runner import BackendRunner, RolloutRunner, sandbox_backend
from veri.services.launcher.backend import SandboxBackend
from veri.services.proxy.control_client import ControlClient
from veri.tools.harness.debug import hosted_tools_line

REPO_ROOT = Path(__file__).resolve().parents[4]  # the checkout (Makefile, build/) in an editable install


class RunHarnessError(RuntimeError):
    """Cannot run; the message says what to do."""


@dataclass(frozen=True)
class RunOptions:
    bundle: Path
    task: dict[str, Any]
    task_index: int
    n: int
    out: Path
    sandbox: str  # docker | local | launcher
    proxy_url: str
    control_token: str | None
    model_name: str
    max_turns: int
    timeout_s: float
    start_stack: bool
    launcher_url: str | None = None  # sandbox launcher: the stack's launcher service
    task_dir: Path | None = None  # a Harbor task folder: the group runs in its environment, then its verifier
    image_map: dict[str, str] = field(default_factory=dict)  # --task-dir: its Dockerfile's FROM mapped
    vendor: Path | None = None  # --task-dir: vendored inputs (default vendor/tasks/)


def ensure_stack(options: RunOptions) -> bool:
    """The proxy answers, or (docker, in a checkout) `make up` brings the stack up (True: it did)."""
    if _healthy(options.proxy_url):
        return False
    if options.sandbox != "docker" or not options.start_stack or not (REPO_ROOT / "Makefile").exists():
        raise RunHarnessError(f"no capture proxy at {options.proxy_url}: start the stack (`make up`) "
                              "or pass --proxy-url")
    print("run-harness: the stack is not up; running `make up` ...", flush=True)
    done = subprocess.run(["make", "--no-print-directory", "up"], cwd=REPO_ROOT)
    if done.returncode != 0 or not _healthy(options.proxy_url):
        raise RunHarnessError("`make up` did not bring the stack up; see its output above")
    return True


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=3).status_code == 200
    except httpx.HTTPError:
        return False


def image_for(options: RunOptions) -> str:
    """docker, launcher: the bundle's image (built when missing); local: the bundle folder itself."""
    if options.sandbox == "local":
        load_manifest(options.bundle)
        return str(options.bundle)
    import docker

    from veri.tools.harness.build import build_bundle_image

    return build_bundle_image(options.bundle, docker.from_env(timeout=600))


def run(options: RunOptions) -> list[CollectedRollout]:
    manifest = load_manifest(options.bundle)
    if ensure_stack(options) and not os.environ.get(envs.VERI_CONTROL_TOKEN):
        # `make up` made a new control token: the one read before it belongs to the stack that was down.
        options = replace(options, control_token=default_control_token())
    image = image_for(options)
    control = ControlClient(options.proxy_url, token=options.control_token)
    backend = None if options.sandbox == "launcher" else _backend(options.sandbox)
    runner: RolloutRunner = (StackLauncher(options.launcher_url or "", options.control_token, options.out / "outputs")
                             if backend is None else BackendRunner(backend, options.out / "outputs"))
    settings = LaunchSettings(image=image, model_name=options.model_name, max_turns=options.max_turns,
                              timeout_s=options.timeout_s, max_parallel=options.n, limits=SandboxLimits(),
                              labels={"job": "run-harness", "bundle": manifest.name},
                              harbor_tasks=harbor_tasks(options, image, manifest.entrypoint))
    collector = GroupCollector(control, runner, settings, max_response_length=1 << 30)
    try:
        collected = asyncio.run(collector.collect(step=0, task_index=options.task_index, task=options.task,
                                                  size=options.n))
    finally:
        if backend is not None:
            backend.close()  # the docker backend's egress gateway goes with it
    for rollout in collected:
        write_record(options.out, rollout)
    return collected


def harbor_tasks(options: RunOptions, image: str, entrypoint: list[str]) -> dict[str, dict[str, Any]]:
    """--task-dir: the task's image built (cached), the bundle image's runtime tree and the verifier's tools
    (tools/tasks/prepare.py); for the stack's launcher, its tests/ staged where that container reads them
    (tools/tasks/stage.py, as `make train` does). Nothing without --task-dir."""
    if options.task_dir is None:
        return {}
    if options.sandbox == "local":
        raise RunHarnessError("--task-dir runs the harness in the task's own image, which a local subprocess has "
                              "not: use --sandbox docker (or launcher, the stack's)")
    from veri.services.launcher.task_runtime.layout import default_vendor_dir
    from veri.services.launcher.task_runtime.runtime import RuntimeTreeError
    from veri.tools.tasks.build import TaskBuildError
    from veri.tools.tasks.prepare import prepare_tasks
    from veri.tools.tasks.stage import StageError, stage_for_launcher

    try:
        prepared = prepare_tasks([options.task_dir], options.vendor or default_vendor_dir(),
                                 image_map=options.image_map, runtime_image=image, entrypoint=entrypoint)
        return stage_for_launcher(prepared) if options.sandbox == "launcher" else prepared
    except (TaskBuildError, RuntimeTreeError, StageError) as error:
        raise RunHarnessError(str(error)) from None


def _backend(sandbox: str) -> SandboxBackend:
    if sandbox == "docker":  # on the stack's rollouts network, next to the proxy and the web fixture
        from veri.services.launcher.docker_backend import DockerBackend

        return DockerBackend(network=os.environ.get(envs.VERI_ROLLOUTS_NETWORK, "veri-rollouts"),
                             launcher_id="run-harness")
    return sandbox_backend(sandbox)


class StackLauncher:
    """The stack's launcher service (`--sandbox launcher`), whatever backend `make up` gave it (the
    kubernetes one: compose.kubernetes.yaml publishes it). Its output folders land in the state
    folder's outputs/ (compose mounts the state folder at /state there); once the group is done they
    are moved under `output_root` here, as the in-process backends leave them."""

    def __init__(self, url: str, token: str | None, output_root: Path) -> None:
        from veri.services.launcher.client import LauncherClient

        self.subdir = f"run-harness/{output_root.parent.name}-{os.getpid()}"
        self.client = LauncherClient(url, token=token, subdir=self.subdir)
        self.output_root = output_root

    async def run_group(self, group: GroupLaunch) -> list[LaunchResult]:
        results = await self.client.run_group(group)
        landed = state_dir() / "outputs" / self.subdir
        moved = []
        for result in results:
            update: dict[str, Any] = {"output_dir": None}
            if result.output_dir and (landed / result.rollout_id).is_dir():
                here = self.output_root / result.rollout_id
                here.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(landed / result.rollout_id, here)
                update["output_dir"] = str(here)
            moved.append(result.model_copy(update=update))
        with contextlib.suppress(OSError):
            landed.rmdir()
        return moved


def write_record(out: Path, rollout: CollectedRollout) -> Path:
    record = rollout.record
    path = out / f"task-{record.task_index}" / f"rollout-{record.rollout_index}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(record.model_dump_json(indent=1))
    os.replace(temporary, path)
    log = path.with_suffix(".log")
    log.write_text(f"--- stdout (tail) ---\n{rollout.launch.stdout_tail}\n--- stderr (tail) ---\n"
                   f"{rollout.launch.stderr_tail}\n")
    return path


def final_answer(rollout: CollectedRollout) -> str:
    """What the harness left in answer.txt, else the policy's last reply."""
    if rollout.output_dir and (rollout.output_dir / "answer.txt").is_file():
        return (rollout.output_dir / "answer.txt").read_text().strip()
    spans = rollout.record.spans
    return str(spans[-1].reply_message.get("content") or "").strip() if spans else ""


def summary_rows(collected: list[CollectedRollout]) -> list[dict[str, Any]]:
    rows = []
    for rollout in collected:
        record: RolloutRecord = rollout.record
        row = record.episode.row
        rows.append({
            "rollout": record.rollout_index,
            "status": record.status.value,
            "exit": record.exit_code,
            "turns": len(record.spans),
            "prompt_tokens": len(row.prompt_ids) if row else 0,
            "completion_tokens": sum(row.env_mask) if row else 0,
            "env_tokens": (len(row.env_mask) - sum(row.env_mask)) if row else 0,
            "prompt_sources": [span.prompt_source.value for span in record.spans],
            "verdicts": [verdict.rule.value for verdict in record.episode.verdicts],
            "hosted_tools": hosted_tools_line(record.spans),
            "answer": final_answer(rollout),
            "stderr_tail": "\n".join(rollout.launch.stderr_tail.strip().splitlines()[-3:]),
            "verifier": verifier_line(rollout),
        })
    return rows


def verifier_line(rollout: CollectedRollout) -> str:
    """A Harbor task's verification: `verifier reward: X` (and each reward.json key), or why there is none;
    "" for a rollout with no task verifier."""
    verified = rollout.launch.verifier
    if verified is None:
        return "" if rollout.record.task.get(TASK_DIR_COLUMN) is None else \
            f"verifier: did not run ({rollout.launch.infrastructure_error or rollout.launch.status})"
    if verified.error.value != "none":
        return f"verifier: {verified.error.value}: {verified.message}"
    keys = " ".join(f"{key}={value:g}" for key, value in sorted(verified.rewards.items()) if key != "reward")
    reward = "none (reward.json has no `reward` key)" if verified.reward is None else f"{verified.reward:g}"
    return f"verifier reward: {reward}" + (f" ({keys})" if keys else "")


def harbor_task_row(folder: Path) -> dict[str, Any]:
    """--task-dir: the task as the dataset row a job with `dataset: {harbor: ...}` would give it."""
    from veri.core.dataset import harbor_row
    from veri.core.harbor_task import check_task
    from veri.core.harbor_task import load_task as load_harbor_task
    from veri.core.problems import ProblemsError

    try:
        task = load_harbor_task(folder)
    except ProblemsError as error:
        raise RunHarnessError(str(error)) from None
    if problems := check_task(task):
        raise RunHarnessError("\n".join(f"{folder}: {problem}" for problem in problems))
    return harbor_row(task)


def default_control_token() -> str | None:
    if token := os.environ.get(envs.VERI_CONTROL_TOKEN):
        return token
    state = state_dir() / "control_token"
    return state.read_text().strip() if state.is_file() else None


def load_task(task_json: str | None, dataset: Path | None, index: int) -> dict[str, Any]:
    if task_json is not None:
        task = json.loads(task_json)
        return task if isinstance(task, dict) else {"prompt": task}
    if dataset is None:
        raise RunHarnessError("give --task JSON or --dataset FILE --index I")
    with dataset.open() as lines:
        for number, line in enumerate(lines):
            if number == index:
                return json.loads(line)
    raise RunHarnessError(f"{dataset} has no row {index}")


def default_out() -> Path:
    return REPO_ROOT / "build" / "run-harness" / time.strftime("%Y%m%d-%H%M%S")
