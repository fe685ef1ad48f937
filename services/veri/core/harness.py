"""The harness contract: what a bundle declares (`veri-harness.toml`) and what each rollout gets.

A bundle is a folder: the manifest, the harness code, and optional dependency lists. Deps are
installed once when the bundle's image is built (`veri harness build DIR`), never per rollout.
Each rollout runs `entrypoint` once, from `/harness`, with exactly the variables of
`rollout_env` and nothing else from the host.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from veri.core import envs

MANIFEST_FILE = "veri-harness.toml"
BUNDLE_MOUNT = "/harness"  # where the bundle's code lives inside its image
OUTPUT_MOUNT = "/veri/output"  # VERI_OUTPUT_DIR inside the sandbox


class HarnessDeps(BaseModel):
    model_config = ConfigDict(extra="forbid")

    requirements: str | None = Field(default=None, description="pip requirements file in the bundle")
    npm: list[str] = Field(default_factory=list, description="npm packages (name@version) installed globally")


class HarnessManifest(BaseModel):
    """`veri-harness.toml`."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$", description="lowercase image-safe name")
    entrypoint: list[str] = Field(min_length=1, description='argv run from /harness, e.g. ["python", "agent.py"]')
    base_image: str = Field(default="veri/base", description="veri/base, veri/base-claude-agent, or your own")
    protocol: Literal["openai", "anthropic"] = Field(default="openai", description="which SDK the harness speaks")
    deps: HarnessDeps = Field(default_factory=HarnessDeps)

    @field_validator("entrypoint", mode="before")
    @classmethod
    def _split_string(cls, value: Any) -> Any:
        return value.split() if isinstance(value, str) else value


class ManifestError(ValueError):
    """A bundle's manifest is missing or invalid; the message names the field and the fix."""


def load_manifest(bundle: Path) -> HarnessManifest:
    path = bundle / MANIFEST_FILE
    if not path.is_file():
        raise ManifestError(f"{bundle} has no {MANIFEST_FILE}: create one with at least name and entrypoint, e.g.\n"
                            'name = "my_harness"\nentrypoint = ["python", "agent.py"]')
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{path}: not valid TOML: {exc}") from exc
    try:
        manifest = HarnessManifest.model_validate(raw)
    except ValidationError as exc:
        problems = "\n".join(
            f"  {'.'.join(str(p) for p in error['loc'])}: {error['msg']}" for error in exc.errors()
        )
        raise ManifestError(f"{path} is invalid:\n{problems}") from exc
    if manifest.deps.requirements and not (bundle / manifest.deps.requirements).is_file():
        raise ManifestError(f"{path}: deps.requirements = {manifest.deps.requirements!r} does not exist in the bundle")
    return manifest


def rollout_env(
    *,
    proxy_base_url: str,
    rollout_id: str,
    api_key: str,
    model: str,
    task: dict[str, Any],
    task_index: int,
    rollout_index: int,
    max_turns: int,
    output_dir: str = OUTPUT_MOUNT,
) -> dict[str, str]:
    """Exactly the variables a rollout sees (DESIGN.md, "The harness contract")."""
    anthropic_base = f"{proxy_base_url.rstrip('/')}/r/{rollout_id}"
    openai_base = f"{anthropic_base}/v1"
    return {
        envs.OPENAI_BASE_URL: openai_base,
        envs.VERI_POLICY_BASE_URL: openai_base,
        envs.OPENAI_API_KEY: api_key,
        envs.ANTHROPIC_BASE_URL: anthropic_base,
        envs.ANTHROPIC_API_KEY: api_key,
        envs.ANTHROPIC_AUTH_TOKEN: api_key,
        envs.VERI_TASK_INPUT: json.dumps(task.get("prompt")),
        envs.VERI_TASK: json.dumps(task),
        envs.VERI_TASK_INDEX: str(task_index),
        envs.VERI_ROLLOUT_INDEX: str(rollout_index),
        envs.VERI_ROLLOUT_ID: rollout_id,
        envs.VERI_POLICY_MODEL: model,
        envs.VERI_MAX_TURNS: str(max_turns),
        envs.VERI_OUTPUT_DIR: output_dir,
    }
