"""Typed configuration of the sandbox launcher (CLI flags or VERI_LAUNCHER_* environment variables)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from veri.core import envs


class LauncherSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=envs.VERI_LAUNCHER_PREFIX, extra="forbid")

    backend: Literal["docker", "kubernetes", "local"] = Field(
        default="docker", description="docker: gVisor sandboxes; kubernetes: one Job per rollout under a gVisor "
                                      "RuntimeClass; local: plain processes, dev only, no isolation"
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
    # --- backend kubernetes (launcher/kubernetes/) -----------------------------------------------------
    namespace: str = Field(default="veri-rollouts", description="namespace of the rollout Jobs")
    runtime_class: str = Field(default="gvisor", description="RuntimeClass of rollout pods (runsc on the nodes)")
    registry: str | None = Field(default=None, description="registry prefix of harness images (veri harness push)")
    output_claim: str | None = Field(
        default=None, description="PVC mounted at output_root here and by rollout pods (subPath); else a hostPath"
    )
    kubeconfig: Path | None = Field(default=None, description="else in-cluster, $KUBECONFIG, ~/.kube/config")
    proxy_port: int = Field(default=8000, description="the proxy's rollout port: the one port rollout pods reach")
    create_per_second: float = Field(default=20.0, gt=0, description="rollouts created per second (token bucket)")
    create_burst: int = Field(default=20, ge=1, description="rollouts created at once before the rate applies")
    sandbox_egress: Literal["web", "none"] = Field(
        default="web", description="without a registry to read each image's egress label: web (proxy + public "
                                   "web) or none (proxy only) for every rollout pod"
    )
    registry_insecure: bool = Field(default=False, description="the registry speaks http, not https")
    host_aliases: dict[str, str] = Field(
        default_factory=dict, description="name -> IP pinned in every rollout pod's /etc/hosts (a stack outside "
                                          "the cluster: its proxy and web fixture), allowed by the NetworkPolicies"
    )
