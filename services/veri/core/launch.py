"""Launcher contract: the trainer (or `veri run-harness`) asks for a group of sandboxed rollouts
and gets one result per rollout. The launcher service and its backends implement this; nothing
else about sandboxes leaks out of services/veri/services/launcher/."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from veri.core.envs import HARNESS_CONTRACT
from veri.core.episodes import RolloutStatus
from veri.core.ids import RolloutId


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


class RolloutLaunch(BaseModel):
    """One harness run in its own sandbox."""

    model_config = ConfigDict(extra="forbid")

    rollout_id: RolloutId
    image: str = Field(description="the harness bundle's image (veri harness build)")
    env: dict[str, str] = Field(description="exactly the harness contract's variables (core.harness.rollout_env)")
    timeout_s: float = Field(gt=0, description="past it the whole sandbox is killed: status truncated")
    limits: SandboxLimits = Field(default_factory=SandboxLimits)
    labels: dict[str, str] = Field(default_factory=dict, description="e.g. job, task_index, rollout_index")

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
