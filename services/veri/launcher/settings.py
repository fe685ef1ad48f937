"""Typed configuration of the sandbox launcher (CLI flags or VERI_LAUNCHER_* environment variables)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from veri.core import envs


class LauncherSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=envs.VERI_LAUNCHER_PREFIX, extra="forbid")

    backend: Literal["docker", "local"] = Field(
        default="docker", description="docker: gVisor sandboxes; local: plain processes, dev only, no isolation"
    )
    network: str = Field(default="veri-rollouts", description="docker network of the sandboxes (rollouts only)")
    output_root: Path = Field(default=Path("build/rollouts"), description="where each rollout's output lands")
    launcher_id: str = Field(default="default", description="label of this launcher's sandboxes")
    max_parallel_rollouts: int = Field(default=64, ge=1, description="sandboxes alive at once, over every group")
    unsafe_runc: bool = False
    token: str | None = Field(
        default=None, description="when set, POST /v1/groups needs `Authorization: Bearer <token>`"
    )
    host_paths: dict[str, str] = Field(
        default_factory=dict, description="a folder as this process sees it -> the host's path (bind mounts)"
    )
