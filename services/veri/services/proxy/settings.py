"""Typed configuration of the capture proxy: each knob declared once, here. `veri serve proxy` makes a flag
of each field (infra/settings_cli.py); a knob not given as a flag comes from VERI_PROXY_<FIELD>, then its default."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from veri.core import envs
from veri.core.records import HostedTools


class ProxySettings(BaseSettings):
    # env_ignore_empty: compose passes `${X:-}`, an empty value, for a knob the user left alone.
    model_config = SettingsConfigDict(env_prefix=envs.VERI_PROXY_PREFIX, extra="forbid", env_ignore_empty=True)

    policy_url: str | None = Field(
        default=None, description="base URL of the policy server (vLLM or veri's hf backend)"
    )
    policy_urls: list[str] = Field(
        default_factory=list, description="several policy servers, one replica each (instead of policy_url)"
    )
    data_parallel_size: int = Field(
        default=1, ge=1, description="the policy's `vllm serve --data-parallel-size`: each rollout pinned to one rank"
        " (X-data-parallel-rank)"
    )
    model_dir: Path = Field(description="model folder: tokenizer, chat template, optional veri.json hint")
    served_model_name: str | None = Field(
        default=None, description="model name the policy serves (none: the one it serves)")
    renderer: str = Field(default="auto", description="renderers name (qwen3, default, ...) or auto")
    thinking_retention: str | None = Field(
        default="all",
        description="renderers bridge policy; 'all' keeps every sampled token in later prompts",
    )
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict, examples=[{"enable_thinking": False}], description="extra chat template variables"
        " (a JSON object)")
    store_dir: Path = Field(default=Path("build/spans"), description="span store folder")
    public_url: str | None = Field(default=None, description="base URL harnesses use to reach the proxy")
    control_token: str | None = Field(
        default=None, description="bearer token for /control (None: loopback clients only)"
    )
    # Sampling comes from the job, never from the harness: the trainer must know what was sampled.
    temperature: float = Field(default=1.0, ge=0.0, description="sampling temperature of every model call")
    top_p: float = Field(default=1.0, gt=0.0, le=1.0, description="nucleus sampling of every model call")
    max_tokens: int = Field(default=1024, ge=1, description="cap on completion tokens per model call")
    hosted_tools: HostedTools = Field(
        default=HostedTools.DROP, description="a request's hosted tools (web_search, ...; the policy cannot run them):"
        " drop them from the prompt, named on the span, or refuse the request with 400",
    )
    max_body_bytes: int = Field(default=32 * 1024 * 1024, ge=1024, description="largest request body taken")
    policy_timeout_s: float = Field(default=600.0, gt=0, description="longest wait for one policy completion")
    record_requests: bool = Field(
        default=False, description="keep every session's requests as sent, for `veri replay record` (else only"
        " sessions opened with record_requests)"
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
            raise ValueError("name the policy one way: --policy-url URL[,URL...], or $VERI_PROXY_POLICY_URL"
                             " (one server), or $VERI_PROXY_POLICY_URLS (a JSON list of servers)")
        if len(set(self.replica_urls)) != len(self.replica_urls):
            raise ValueError(f"policy_urls lists a server twice: {self.policy_urls}")
        return self

    @property
    def replica_urls(self) -> list[str]:
        return self.policy_urls or [self.policy_url]
