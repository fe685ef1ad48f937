"""Typed configuration of the sandbox launcher: each knob declared once, here. `veri serve launcher` makes a
flag of each field (infra/settings_cli.py); a knob not given as a flag comes from VERI_LAUNCHER_<FIELD>, then
its default (a dict or list variable is JSON)."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from veri.core import envs


class LauncherSettings(BaseSettings):
    # env_ignore_empty: compose passes `${X:-}`, an empty value, for a knob the user left alone.
    model_config = SettingsConfigDict(env_prefix=envs.VERI_LAUNCHER_PREFIX, extra="forbid", env_ignore_empty=True)

    backend: Literal["docker", "kubernetes", "local"] = Field(
        default="docker", description="docker: gVisor sandboxes; kubernetes: one Job per rollout under a gVisor "
                                      "RuntimeClass; local: plain processes, dev only, no isolation"
    )
    network: str = Field(default="veri-rollouts", description="docker network of the sandboxes (rollouts only)")
    output_root: Path = Field(default=Path("build/rollouts"), description="where each rollout's VERI_OUTPUT_DIR is"
                              " collected (the trainer reads the same path)")
    launcher_id: str = Field(default="default", description="label of this launcher's sandboxes (leftovers with it"
                                                            " are removed at start)")
    max_parallel_rollouts: int = Field(default=64, ge=1, description="sandboxes alive at once, over every group")
    unsafe_runc: bool = Field(default=False, description="run sandboxes with runc instead of gVisor: NO isolation"
                                                         " from the host kernel")
    token: str | None = Field(
        default=None, description="when set, POST /v1/groups needs `Authorization: Bearer <token>`"
    )
    host_paths: dict[str, str] = Field(
        default_factory=dict, examples=[{"/state": "/srv/veri/state"}],
        description="a folder as this process sees it = the host's path (bind mounts name host"
        " paths; read from this container's mounts when omitted)"
    )
    # --- backend kubernetes (launcher/kubernetes/) -----------------------------------------------------
    namespace: str = Field(default="veri-rollouts", description="namespace of the rollout Jobs")
    runtime_class: str = Field(default="gvisor", description="RuntimeClass of rollout pods (runsc on the nodes)")
    registry: str | None = Field(default=None, description="registry the nodes pull"
                                    " harness images from (veri harness push --registry R): images become R/<image>")
    output_claim: str | None = Field(
        default=None, description="PVC mounted at the output root here and by each rollout pod (subPath); without"
        " it a hostPath of the same path"
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
        default_factory=dict, examples=[{"proxy": "10.0.0.5"}],
        description="NAME=IP pinned in every rollout pod's /etc/hosts (hostAliases; the "
        "NetworkPolicies allow IP): a proxy and web fixture outside the cluster, e.g. proxy=10.0.0.5 (compose's "
        "VERI_K8S_STACK_ADDRESS)"
    )

    @field_validator("host_aliases")
    @classmethod
    def _aliases_name_addresses(cls, value: dict[str, str]) -> dict[str, str]:
        for name, address in value.items():
            try:
                ipaddress.ip_address(address)
            except ValueError:
                raise ValueError(f"{name}={address}: give NAME=IP (an IP address, e.g. proxy=10.0.0.5)") from None
        return value
