"""`veri tasks oracle`: does each task's own solution score 1 (and doing nothing 0, with --agent nop)? Each
task's image is built (cached), then solution/solve.sh runs as the agent through the docker backend's task
sandbox under runsc, then the task's tests by the verifier, as in training (docs/harbor-tasks.md)."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from veri.core import envs
from veri.core.harbor_task import check_task, load_task
from veri.core.launch import AgentKind, GroupLaunch, LaunchResult, RolloutLaunch, TaskImageConfig, task_environment
from veri.core.problems import ProblemsError
from veri.core.rules import VerifierError
from veri.services.launcher.docker_backend import DEFAULT_NETWORK, DockerBackend, ensure_rollouts_network
from veri.services.launcher.docker_egress import network_names
from veri.services.launcher.group import run_group

DEFAULT_AGENT_TIMEOUT_S = 600.0  # a task without [agent] timeout_sec


@dataclass(frozen=True)
class OracleLine:
    task: str
    reward: float | None
    rewards: dict[str, float]
    problem: str  # "" when verified

    def passed(self, agent: AgentKind) -> bool:
        """oracle: every reward (reward.txt's, each reward.json key) is 1; nop: the tests ran and said
        something (a nop that scores above 0 only warns: the tests check too little)."""
        if self.problem or not self.rewards:
            return False
        return agent == "nop" or min(self.rewards.values()) >= 1.0

    def text(self, agent: AgentKind) -> str:
        if self.problem:
            return f"{self.task}: FAILED: {self.problem}"
        keys = " ".join(f"{key}={value:g}" for key, value in sorted(self.rewards.items()) if key != "reward")
        reward = f"reward {self.reward:g}" if self.reward is not None else "no reward"
        if self.passed(agent):
            verdict = "ok"
            if agent == "nop" and self.reward:
                verdict = "WARNING: doing nothing already scores above 0 (the tests check too little)"
        else:
            low = sorted(key for key, value in self.rewards.items() if value < 1.0)
            verdict = f"FAILED: the oracle's solution scored below 1 ({', '.join(low)})"
        return f"{self.task}: {reward}{' (' + keys + ')' if keys else ''}: {verdict}"


def _reward(rewards: dict[str, float], reward: float | None) -> float | None:
    """The task's one number: `reward` (reward.txt, or reward.json's key), else the mean of reward.json's keys."""
    if reward is not None:
        return reward
    return sum(rewards.values()) / len(rewards) if rewards else None


def line_of(task: str, result: LaunchResult) -> OracleLine:
    if result.verifier is None:
        why = result.infrastructure_error or f"the rollout {result.status} before the verifier"
        return OracleLine(task, None, {}, f"the sandbox did not run: {why}")
    verified = result.verifier
    if verified.error is not VerifierError.NONE:
        tail = verified.files.get("test-stdout.txt", verified.stdout_tail)[-2000:]
        return OracleLine(task, None, {}, f"verifier {verified.error.value}: {verified.message}\n"
                                          f"  test.sh's output (its tail):\n{tail}")
    return OracleLine(task, _reward(verified.rewards, verified.reward), dict(verified.rewards), "")


def run_oracle(prepared: dict[str, dict[str, Any]], *, agent: AgentKind, max_parallel: int = 4,
               network: str | None = None) -> list[OracleLine]:
    """Run each prepared task (tools/tasks/prepare.py) once with `agent`; one line each, in order."""
    launches, names, problems = [], {}, {}
    for index, (folder, paths) in enumerate(prepared.items()):
        try:
            task = load_task(Path(folder))
        except ProblemsError as exc:
            problems[folder] = str(exc)
            continue
        refused = check_task(task)
        if refused:
            problems[folder] = "; ".join(str(p) for p in refused)
            continue
        rollout_id = f"{agent}-{index}-{Path(folder).name}"[:60]
        names[rollout_id] = folder
        env = task_environment(task, image=str(paths["image"]), agent=agent, runtime_tree=paths["runtime_tree"],
                               tools_dir=paths["tools_dir"],
                               image_config=TaskImageConfig.model_validate(paths["image_config"]))
        launches.append(RolloutLaunch(
            rollout_id=rollout_id, image=str(paths["image"]), task_env=env,
            env={"VERI_ROLLOUT_ID": rollout_id, "VERI_TASK": json.dumps({"task": task.name})},
            timeout_s=task.config.agent.timeout_sec or DEFAULT_AGENT_TIMEOUT_S, labels={"job": f"tasks-{agent}"}))
    results: dict[str, LaunchResult] = {}
    if launches:
        import docker

        client = docker.from_env(timeout=120)
        network = network or os.environ.get(envs.VERI_ROLLOUTS_NETWORK) or DEFAULT_NETWORK
        for name in (network, network_names(network)["none"], network_names(network)["allowlist"]):
            ensure_rollouts_network(client, name)  # a task's network_mode picks one (compose.yaml makes them too)
        backend = DockerBackend(network=network, client=client, launcher_id=f"tasks-{agent}")
        try:
            with tempfile.TemporaryDirectory(prefix="veri-oracle-") as out:
                group = GroupLaunch(launches=launches, max_parallel=max_parallel)
                results = {r.rollout_id: r for r in asyncio.run(run_group(backend, group, Path(out)))}
        finally:
            backend.close()
    lines = []
    for folder in prepared:
        if folder in problems:
            lines.append(OracleLine(Path(folder).name, None, {}, problems[folder]))
            continue
        rollout_id = next(r for r, f in names.items() if f == folder)
        lines.append(line_of(Path(folder).name, results[rollout_id]))
    return lines
