"""Typed configuration of the capture proxy (CLI flags or VERI_PROXY_* environment variables)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from veri.core import envs
from veri.core.records import HostedTools


class ProxySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=envs.VERI_PROXY_PREFIX, extra="forbid")

    policy_url: str | None = Field(
        default=None, description="base URL of the policy server (vLLM or veri's hf backend)"
    )
    policy_urls: list[str] = Field(
        default_factory=list, description="several policy servers, one replica each (instead of policy_url)"
    )
    data_parallel_size: int = Field(
        default=1, ge=1, description="vLLM --data-parallel-size of each server: ranks pinned by X-data-parallel-rank"
    )
    model_dir: Path = Field(description="model folder: tokenizer, chat template, optional veri.json hint")
    served_model_name: str | None = Field(default=None, description="model name sent to the policy")
    renderer: str = Field(default="auto", description="renderers name (qwen3, default, ...) or auto")
    thinking_retention: str | None = Field(
        default="all",
        description="renderers bridge policy; 'all' keeps every sampled token in later prompts",
    )
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict, description="e.g. enable_thinking")
    store_dir: Path = Path("build/spans")
    public_url: str | None = Field(default=None, description="base URL harnesses use to reach the proxy")
    control_token: str | None = Field(
        default=None, description="bearer token for /control (None: loopback clients only)"
    )
    # Sampling comes from the job, never from the harness: the trainer must know what was sampled.
    temperature: float = Field(default=1.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(default=1024, ge=1, description="cap on completion tokens per model call")
    hosted_tools: HostedTools = Field(
        default=HostedTools.DROP, description="hosted tools in a request: drop (from the prompt, named on the span)"
        " or refuse (400)",
    )
    max_body_bytes: int = Field(default=32 * 1024 * 1024, ge=1024)
    policy_timeout_s: float = Field(default=600.0, gt=0)
    record_requests: bool = Field(
        default=False, description="keep every session's requests as sent (veri replay); else per session"
    )

    @field_validator("policy_url", "public_url")
    @classmethod
    def _strip_slash(cls, value: str | None) -> str | None:
        return value.rstrip("/") if value else value

    @field_validator("policy_urls")
    @classmethod
    def _strip_slashes(cls, value: list[str]) -> list[str]:
        return [url.rstrip("/") for url in value]

    @model_validator(mode="after")
    def _one_way_to_name_the_policy(self) -> ProxySettings:
        if bool(self.policy_url) == bool(self.policy_urls):
            raise ValueError("set either policy_url (one server) or policy_urls (several), not both or neither")
        if len(set(self.replica_urls)) != len(self.replica_urls):
            raise ValueError(f"policy_urls lists a server twice: {self.policy_urls}")
        return self

    @property
    def replica_urls(self) -> list[str]:
        return self.policy_urls or [self.policy_url]
