"""Launcher contract: the trainer (or `veri run-harness`) asks for a group of sandboxed rollouts
and gets one result per rollout. The launcher service and its backends implement this; nothing
else about sandboxes leaks out of services/veri/services/launcher/."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from veri.core import egress
from veri.core.envs import HARNESS_CONTRACT
from veri.core.episodes import RolloutStatus
from veri.core.harbor_task import HarborTask
from veri.core.harbor_task import NetworkMode as HarborNetwork
from veri.core.ids import RolloutId
from veri.core.rules import VerifierError

NetworkMode = Literal["public", "no-network", "allowlist"]  # Harbor's [environment] network_mode
AgentKind = Literal["harness", "oracle", "nop"]  # who takes the agent's turn (Harbor's -a oracle / -a nop)


class SandboxLimits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cpus: float = Field(default=1.0, gt=0, description="CPU share of one sandbox")
    memory_mb: int = Field(default=2048, ge=64, description="hard memory limit (OOM kill past it)")
    nproc: int = Field(default=256, ge=8, description="ulimit nproc for the sandbox user (fork bombs stop here)")
    pids_limit: int = Field(default=4096, ge=64,
                            description="backstop only: under gVisor it counts the sandbox's own threads")
    tmpfs_mb: int = Field(default=512, ge=16, description="size of the writable work dir and /tmp")
    output_max_bytes: int = Field(default=16 * 1024 * 1024, ge=0, description="cap on collected VERI_OUTPUT_DIR")
    log_tail_bytes: int = Field(default=64 * 1024, ge=1024, description="kept tail of stdout and of stderr")


class TaskHealthcheck(BaseModel):
    """[environment.healthcheck]: run in the sandbox (root, no capabilities) before the agent's turn, as
    Docker's HEALTHCHECK counts: failures in the start period do not count; `retries` in a row after it
    fail the rollout (the task's fault, named)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: str = Field(min_length=1, description="a shell command (sh -c); exit 0 = ready")
    interval_s: float = Field(default=5.0, gt=0)
    timeout_s: float = Field(default=30.0, gt=0)
    start_period_s: float = Field(default=0.0, ge=0)
    start_interval_s: float = Field(default=5.0, gt=0)
    retries: int = Field(default=3, ge=1)


class TaskImageConfig(BaseModel):
    """What the agent's and the verifier's execs need from the task image's own config, read where the image
    was built (`veri tasks build` on the host): a launcher that cannot inspect the image (the kubernetes
    backend with no registry and no Docker, the stack's launcher container) takes it from here."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    workdir: str | None = Field(default=None, description="the image's WORKDIR")
    user: str | None = Field(default=None, description="the image's USER (its user part)")
    path: str | None = Field(default=None, description="the image's PATH")

    @classmethod
    def of(cls, config: dict[str, Any]) -> TaskImageConfig:
        """From docker inspect's `Config` (or a registry config blob's `config`)."""
        env = dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)
        user = (config.get("User") or "").split(":", 1)[0] or None
        return cls(workdir=str(config.get("WorkingDir") or "") or None, user=user, path=env.get("PATH"))


class TaskEnvironment(BaseModel):
    """A Harbor task's own environment: the rollout runs in the task's image and its hidden tests are run
    after the agent by a verifier the agent cannot reach (docs/security.md, "Harbor tasks"). Built by the
    dataset side from a task folder; the launcher only reads it. Host paths are as the launcher sees them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    image: str = Field(description="the task's image (built or mapped by `veri tasks build`)")
    workdir: str | None = Field(default=None, description="cwd of agent and verifier (None: the image's WORKDIR)")
    env: dict[str, str] = Field(default_factory=dict, description="[environment.env], literal values")
    agent: AgentKind = Field(default="harness", description="harness: the bundle's command; oracle: "
                             "solution/solve.sh; nop: nothing (the tests then see the task untouched)")
    harness_command: list[str] = Field(default_factory=list,
                                       description="the harness's command inside the sandbox (agent=harness)")
    solution_dir: str | None = Field(default=None, description="host folder copied to /solution (agent=oracle)")
    solution_env: dict[str, str] = Field(default_factory=dict, description="[solution] env (agent=oracle)")
    agent_user: str | None = Field(default=None, description="[agent] user, a name or uid (None: the image's USER, "
                                   "else root)")
    agent_timeout_s: float | None = Field(default=None, gt=0,
                                          description="[agent] timeout_sec; the launch's timeout_s caps it")
    cpus: float | None = Field(default=None, gt=0, description="None: the launch's SandboxLimits")
    memory_mb: int | None = Field(default=None, ge=64, description="None: the launch's SandboxLimits")
    storage_mb: int | None = Field(default=None, ge=1, description="not enforced by the docker backend (logged)")
    network_mode: NetworkMode = "public"
    allowed_hosts: list[str] = Field(default_factory=list,
                                     description="network_mode = allowlist: host[:port], *.domain")
    tests_dir: str = Field(description="host folder of the task's tests/ (test.sh): piped to the verifier only")
    verifier_user: str | None = Field(default=None, description="[verifier] user (None: the image's USER, else root)")
    verifier_env: dict[str, str] = Field(default_factory=dict, description="[verifier] env, literal values")
    verifier_timeout_s: float = Field(default=600.0, gt=0, description="[verifier] timeout_sec")
    healthcheck: TaskHealthcheck | None = None
    runtime_tree: str | None = Field(default=None, description="host folder mounted read-only at /veri/rt")
    tools_dir: str | None = Field(default=None, description="host folder of the verifier tools, at /veri/tools")
    image_config: TaskImageConfig | None = Field(default=None, description="the image's WORKDIR, USER and PATH as "
                                                 "built (None: the launcher reads the image)")

    @field_validator("agent_user", "verifier_user", mode="before")
    @classmethod
    def _user(cls, user: object) -> object:
        return str(user) if isinstance(user, int) and not isinstance(user, bool) else user

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts(cls, hosts: list[str]) -> list[str]:
        return sorted({egress.check_entry(host) for host in hosts})

    @model_validator(mode="after")
    def _agent_needs(self) -> TaskEnvironment:
        if self.agent == "harness" and not self.harness_command:
            raise ValueError("agent = harness needs harness_command (the bundle's command inside the sandbox)")
        if self.agent == "oracle" and not self.solution_dir:
            raise ValueError("agent = oracle needs solution_dir (the task's solution/ folder, with solve.sh)")
        if self.network_mode == "allowlist" and not self.allowed_hosts:
            raise ValueError('network_mode = "allowlist" with no allowed_hosts allows nothing: write '
                             'network_mode = "no-network" to say so')
        return self

    def egress(self) -> egress.Egress:
        """The task's network ask as a bundle egress value (core/egress.py)."""
        if self.network_mode == "no-network":
            return egress.EGRESS_NONE
        if self.network_mode == "allowlist":
            return list(self.allowed_hosts)
        return egress.EGRESS_OPEN


def task_environment(task: HarborTask, *, image: str, agent: AgentKind = "harness",
                     harness_command: list[str] | None = None, runtime_tree: str | None = None,
                     tools_dir: str | None = None, image_config: TaskImageConfig | None = None) -> TaskEnvironment:
    """A loaded task (core/harbor_task.py `load_task`, already passed by `check_task`) as the launch's
    `task_env`. `image`: the task's image as `veri tasks build` tagged it; `agent`: harness (the bundle's
    `harness_command`, from its `runtime_tree`), oracle (the task's solution/solve.sh) or nop;
    `tools_dir`: the vendored verifier tools; `image_config`: the image's own, as built. Paths as the launcher
    sees them."""
    config, environment = task.config, task.config.environment
    check = environment.healthcheck
    modes: dict[HarborNetwork, NetworkMode] = {HarborNetwork.PUBLIC: "public", HarborNetwork.NO_NETWORK: "no-network",
                                               HarborNetwork.ALLOWLIST: "allowlist"}
    network = modes[environment.network_mode]
    if network == "allowlist" and not environment.allowed_hosts:
        network = "no-network"  # Harbor 1.3: an empty allowlist denies all
    return TaskEnvironment(
        image=image, workdir=environment.workdir, env=dict(environment.env), agent=agent,
        harness_command=list(harness_command or []),
        solution_dir=str(task.folder / "solution") if agent == "oracle" else None,
        solution_env=dict(config.solution.env),
        agent_user=None if config.agent.user is None else str(config.agent.user),
        agent_timeout_s=config.agent.timeout_sec or None,
        cpus=environment.cpus or None, memory_mb=environment.memory_mb or None,
        storage_mb=environment.storage_mb or None,
        network_mode=network, allowed_hosts=list(environment.allowed_hosts or []) if network == "allowlist" else [],
        tests_dir=str(task.folder / "tests"),
        verifier_user=None if config.verifier.user is None else str(config.verifier.user),
        verifier_env=dict(config.verifier.env), verifier_timeout_s=config.verifier.timeout_sec,
        healthcheck=None if check is None else TaskHealthcheck(
            command=check.command, interval_s=check.interval_sec, timeout_s=check.timeout_sec,
            start_period_s=check.start_period_sec, start_interval_s=check.start_interval_sec, retries=check.retries),
        runtime_tree=runtime_tree, tools_dir=tools_dir, image_config=image_config,
    )


class RolloutLaunch(BaseModel):
    """One harness run in its own sandbox."""

    model_config = ConfigDict(extra="forbid")

    rollout_id: RolloutId
    image: str = Field(description="the harness bundle's image (veri harness build)")
    env: dict[str, str] = Field(description="exactly the harness contract's variables (core.harness.rollout_env)")
    timeout_s: float = Field(gt=0, description="past it the whole sandbox is killed: status truncated")
    limits: SandboxLimits = Field(default_factory=SandboxLimits)
    labels: dict[str, str] = Field(default_factory=dict, description="e.g. job, task_index, rollout_index")
    task_env: TaskEnvironment | None = Field(
        default=None, description="a Harbor task: run in its image, then verified by its tests (docker backend); "
        "`image` is then the bundle's (its egress label applies), for oracle / nop any image (the task's)")

    @field_validator("env")
    @classmethod
    def _only_the_contract(cls, env: dict[str, str]) -> dict[str, str]:
        # A launch request cannot set LD_PRELOAD, PATH and the like inside a sandbox: only the contract.
        outside = sorted(set(env) - HARNESS_CONTRACT)
        if outside:
            raise ValueError(f"env names {', '.join(outside)}, outside the harness contract (core/envs.py); "
                             "a rollout gets only the contract's variables: pass task data in VERI_TASK")
        return env


class GroupLaunch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    launches: list[RolloutLaunch] = Field(min_length=1)
    max_parallel: int = Field(default=8, ge=1)


class VerifierResult(BaseModel):
    """What a task's tests said, read from the verifier's own output (never from a file the agent can write)."""

    model_config = ConfigDict(extra="forbid")

    error: VerifierError = VerifierError.NONE
    message: str = Field(default="", description="why, when error is not none")
    exit_code: int | None = Field(default=None, description="test.sh's exit status")
    reward: float | None = Field(default=None, description="reward.json's `reward`, else reward.txt; None on error")
    rewards: dict[str, float] = Field(default_factory=dict, description="every numeric key of reward.json "
                                      "(+ `reward` from reward.txt)")
    ignored_keys: list[str] = Field(default_factory=list, description="reward.json keys that are not numbers")
    stdout_tail: str = ""
    stderr_tail: str = ""
    files: dict[str, str] = Field(default_factory=dict, description="/logs/verifier's files (text, capped)")
    duration_s: float = 0.0

    @model_validator(mode="after")
    def _consistent(self) -> VerifierResult:
        if self.error is not VerifierError.NONE and (self.reward is not None or self.rewards):
            raise ValueError("a verifier that failed has no reward")
        if any(not math.isfinite(v) for v in self.rewards.values()):
            raise ValueError("rewards must be finite")
        return self


class LaunchResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rollout_id: str
    status: RolloutStatus
    exit_code: int | None = None
    stdout_tail: str = ""
    stderr_tail: str = ""
    output_dir: str | None = Field(default=None, description="host folder holding the collected VERI_OUTPUT_DIR")
    output_truncated: bool = False
    infrastructure_error: str | None = Field(
        default=None, description="set when the sandbox could not run at all (image missing, docker down)"
    )
    started_at: float
    duration_s: float
    verifier: VerifierResult | None = Field(default=None, description="a task launch's verification")
