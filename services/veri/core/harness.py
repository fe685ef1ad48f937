"""The harness contract: what a bundle declares (`veri-harness.toml`) and what each rollout gets.

A bundle is a folder: the manifest, the harness code, and optional dependency lists. Deps are
installed once when the bundle's image is built (`veri harness build DIR`), never per rollout.
Each rollout runs `entrypoint` once, from `/harness`, with exactly the variables of
`rollout_env` and nothing else from the host.

`load_manifest` is the one manifest check: `veri harness build`, `veri validate` (validation/job_checks.py) and
the local backend all refuse the same bundles, each problem with its fix.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from veri.core import egress as egress_policy
from veri.core import envs

MANIFEST_FILE = "veri-harness.toml"
BUNDLE_MOUNT = "/harness"  # where the bundle's code lives inside its image
OUTPUT_MOUNT = "/veri/output"  # VERI_OUTPUT_DIR inside the sandbox
HARNESS_UID = 1000  # the `harness` user of veri/base: every sandbox runs as it (uid = gid)
# An entrypoint argument ending so (or starting ./) names a file the bundle must hold.
SCRIPT_SUFFIXES = (".py", ".sh", ".js", ".mjs", ".cjs", ".ts", ".rb", ".pl")
# veri's own harness bases, and the make target that builds each (mk/docker.mk). veri/base-claude-agent holds Claude
# Code, used under Anthropic's terms, which building it accepts (docs/licences.md): `make images` leaves it out, and
# make train and make eval build it for a job whose bundle is FROM it (veri stack-env's VERI_BUNDLE_BASE_TARGET).
BASE_IMAGE_TARGETS = {"veri/base": "images", "veri/base-codex-agent": "images",
                      "veri/base-claude-agent": "images-claude-agent"}
NPM_SPEC = re.compile(r"(@[a-z0-9][\w.-]*/)?[a-z0-9][\w.-]*(@[\w.^~<>=*|+ -]+)?")

# What to do about each manifest field when it is wrong (shown with the validation error).
FIELD_FIXES = {
    "name": 'a lowercase name for the image, e.g. name = "my_harness" (letters, digits, _ . -)',
    "entrypoint": 'the command run from /harness for each rollout, e.g. entrypoint = ["python", "agent.py"]',
    "base_image": 'an image on this machine: "veri/base" (Python + openai/anthropic SDKs), '
                  '"veri/base-claude-agent" (+ Claude Code), "veri/base-codex-agent" (+ the Codex CLI), '
                  'or your own (make base-image)',
    "protocol": 'the SDK the harness speaks: "openai" or "anthropic"',
    "deps": "a [deps] table with `requirements` (a pip requirements file in the bundle) and/or "
            '`npm` (a list like ["left-pad@1.3.0"])',
    "deps.requirements": 'a pip requirements file inside the bundle, e.g. requirements = "requirements.txt"',
    "deps.npm": 'a list of npm packages, e.g. npm = ["left-pad@1.3.0"]',
    "egress": egress_policy.EGRESS_FIX,
}


class HarnessDeps(BaseModel):
    model_config = ConfigDict(extra="forbid")

    requirements: str | None = Field(default=None, description="pip requirements file in the bundle")
    npm: list[str] = Field(default_factory=list, description="npm packages (name@version) installed globally")


class HarnessManifest(BaseModel):
    """`veri-harness.toml`."""

    model_config = ConfigDict(extra="forbid")

    # An image name is at most 255 characters, `veri/harness-` and a tag included.
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$", max_length=128, description="lowercase image-safe name")
    entrypoint: list[str] = Field(min_length=1, description='argv run from /harness, e.g. ["python", "agent.py"]')
    base_image: str = Field(default="veri/base", description="veri/base, veri/base-claude-agent, or your own")
    protocol: Literal["openai", "anthropic"] = Field(default="openai", description="which SDK the harness speaks")
    deps: HarnessDeps = Field(default_factory=HarnessDeps, description="what the image installs when it is built")
    # Enforced by the launcher (core/egress.py): a harness that ignores HTTP(S)_PROXY is stopped too.
    egress: str | list[str] = Field(default=egress_policy.EGRESS_OPEN,
                                    description='"open", "none", or a list of host[:port] the sandbox may reach')

    @field_validator("egress", mode="before")
    @classmethod
    def _check_egress(cls, value: Any) -> Any:
        try:
            return egress_policy.normalize(value)
        except egress_policy.EgressError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("entrypoint", mode="before")
    @classmethod
    def _split_string(cls, value: Any) -> Any:
        return value.split() if isinstance(value, str) else value


class ManifestError(ValueError):
    """A bundle's manifest is missing or invalid; the message names the field and the fix."""


def load_manifest(bundle: Path) -> HarnessManifest:
    """The bundle's manifest, fully checked: every caller (`veri harness build`, `veri validate`, the
    local backend) refuses the same bundles. A ManifestError names the field and the fix."""
    bundle = Path(bundle)
    path = bundle / MANIFEST_FILE
    if not bundle.is_dir():
        raise ManifestError(f"{bundle} is not a folder: a harness bundle is a folder with a {MANIFEST_FILE}")
    if not path.is_file():
        raise ManifestError(f"{bundle} has no {MANIFEST_FILE}: create one with at least name and entrypoint, e.g.\n"
                            'name = "my_harness"\nentrypoint = ["python", "agent.py"]')
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{path}: not valid TOML: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{path}: not UTF-8 text ({exc})\n    fix: save it as UTF-8 TOML") from exc
    except RecursionError as exc:
        raise ManifestError(f"{path}: arrays or tables nest too deeply to read\n    fix: write flat TOML: name,"
                            " entrypoint, and a [deps] table") from exc
    try:
        manifest = HarnessManifest.model_validate(raw)
    except ValidationError as exc:
        problems = "\n".join(_field_problem(error) for error in exc.errors())
        raise ManifestError(f"{path} is invalid:\n{problems}") from exc
    _check_files(bundle, manifest)
    return manifest


def _field_problem(error: Any) -> str:
    field = ".".join(str(p) for p in error["loc"] if not isinstance(p, int))
    fix = FIELD_FIXES.get(field) or FIELD_FIXES.get(field.split(".")[0])
    if error["type"] == "extra_forbidden":
        fix = f"remove it; known fields: {', '.join(_known_fields(field))}"
    return f"  {field}: {error['msg']}" + (f"\n    fix: {fix}" if fix else "")


def _known_fields(field: str) -> list[str]:
    model: type[BaseModel] = HarnessDeps if field.startswith("deps.") else HarnessManifest
    return list(model.model_fields)


def _check_files(bundle: Path, manifest: HarnessManifest) -> None:
    """What the manifest names must be in the bundle (the image holds only the bundle)."""
    path = bundle / MANIFEST_FILE
    if manifest.deps.requirements:
        requirements = (bundle / manifest.deps.requirements).resolve()
        if not requirements.is_relative_to(bundle.resolve()):
            raise ManifestError(f"{path}: deps.requirements = {manifest.deps.requirements!r} points outside the"
                                f" bundle\n    fix: {FIELD_FIXES['deps.requirements']}")
        if not requirements.is_file():
            raise ManifestError(f"{path}: deps.requirements = {manifest.deps.requirements!r} does not exist in the"
                                " bundle")
    for arg in manifest.entrypoint:
        # A shell snippet (`sh -c "cd x && python agent.py"`) is not a file name: its words are the shell's.
        looks_like_file = not any(c.isspace() for c in arg) and (
            arg.startswith("./") or (not arg.startswith("-") and arg.endswith(SCRIPT_SUFFIXES)))
        if looks_like_file and not arg.startswith("/") and not (bundle / arg).exists():
            raise ManifestError(f"{path}: entrypoint names {arg!r}, which is not in the bundle\n"
                                f"    fix: add {arg} to {bundle}, or change entrypoint (it runs from {BUNDLE_MOUNT})")
    for package in manifest.deps.npm:
        if not NPM_SPEC.fullmatch(package):
            raise ManifestError(f"{path}: deps.npm entry {package!r} is not an npm package spec\n"
                                f"    fix: {FIELD_FIXES['deps.npm']}")


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
