"""Which weights an eval runs, and putting them into the running policy server.

`--model DIR` (a transformers folder), or `--job JOB` with `--step K` (TRL's checkpoints/checkpoint-K),
`final` (the job's model/ folder) or `base` (the job config's model). A LoRA checkpoint (an adapter, no
full weights) is merged over the base model into the eval's own weights/ folder first, as the trainer
merges what it syncs (`services/policy/weight_files.py`). The server then loads them as it loads a step's
weights: hf `POST /update_weights`, vLLM `/collective_rpc` (veri's worker extension) and a prefix-cache
reset. The server keeps serving them after the eval: a training job needs its own policy server.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from veri.archive import ArchiveLayout
from veri.archive.resume import CHECKPOINT_DIR
from veri.core.config import Backend, JobConfig
from veri.loop.evals.errors import EvalError

ADAPTER_FILE = "adapter_model.safetensors"
STEP = re.compile(r"^(?:step-)?(\d+)$")


@dataclass(frozen=True)
class Checkpoint:
    label: str  # "base", "final", "step-4", or the model folder's name
    folder: Path  # a transformers folder, a TRL checkpoint, or a LoRA adapter checkpoint
    job: str | None = None
    step: int | None = None  # the optimizer steps its weights have had (base: 0; --model, final: None)

    @property
    def is_adapter(self) -> bool:
        return (self.folder / ADAPTER_FILE).is_file() and not any(
            p.name != ADAPTER_FILE for p in self.folder.glob("*.safetensors"))


def resolve_checkpoint(config: JobConfig, *, model: Path | None, job: str | None, step: str | None,
                       jobs_root: Path) -> Checkpoint:
    if model is not None and job is not None:
        raise EvalError("give --model DIR or --job JOB (with --step), not both")
    if model is not None:
        if step is not None:
            raise EvalError("--step goes with --job: --model names the weights itself")
        return Checkpoint(label=model.resolve().name, folder=_model_folder(model, "--model"))
    if job is None:
        if step not in (None, "base"):
            raise EvalError(f"--step {step} needs --job JOB: the training job whose checkpoint it is")
        return Checkpoint(label="base", folder=_model_folder(config.model, "the config's model"), step=0)
    layout = ArchiveLayout(jobs_root.resolve() / job)
    if not layout.dir.is_dir():
        known = sorted(p.name for p in jobs_root.iterdir() if p.is_dir()) if jobs_root.is_dir() else []
        raise EvalError(f"no job {job!r} in {jobs_root}: jobs there: {', '.join(known) or 'none'}"
                        " (pass --output for another folder of jobs)")
    chosen = step or "final"
    if chosen == "base":
        return Checkpoint(label="base", folder=_model_folder(config.model, "the config's model"), job=job, step=0)
    if chosen == "final":
        if not (layout.model / "config.json").is_file():
            raise EvalError(f"job {job!r} has no final model ({layout.model}): it has not finished; pick a"
                            f" checkpoint with --step K ({_steps_text(layout)}) or --step base")
        return Checkpoint(label="final", folder=layout.model, job=job)
    match = STEP.match(chosen)
    if not match:
        raise EvalError(f"--step {chosen!r}: give a step number K, final or base")
    number = int(match.group(1))
    folder = layout.checkpoints / f"checkpoint-{number}"
    if not folder.is_dir():
        raise EvalError(f"job {job!r} has no checkpoint at step {number}: {_steps_text(layout)}; or --step final"
                        " / base (the job config's save_steps sets how often checkpoints are kept)")
    return Checkpoint(label=f"step-{number}", folder=folder, job=job, step=number)


def weights_to_load(checkpoint: Checkpoint, config: JobConfig, scratch: Path, shared: Path) -> Path:
    """The folder of full safetensors the policy server loads: the checkpoint's own when it lies under
    `shared` (the jobs folder, which the stack's policy server mounts at the same path), else a copy in
    `scratch` (a model folder: the trainer container's /work is not the policy's); a LoRA adapter merged."""
    if not checkpoint.is_adapter:
        files = sorted(checkpoint.folder.glob("*.safetensors"))
        if not files:
            raise EvalError(f"{checkpoint.folder} holds no *.safetensors weights: give a transformers model folder")
        if checkpoint.folder.resolve().is_relative_to(shared.resolve()):
            return checkpoint.folder
        staged = scratch / checkpoint.label
        staged.mkdir(parents=True, exist_ok=True)
        for file in files:
            shutil.copyfile(file, staged / file.name)
        return staged
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from veri.services.policy.weight_files import policy_state_dict, write_weights

    base = AutoModelForCausalLM.from_pretrained(config.model)
    merged = PeftModel.from_pretrained(base, checkpoint.folder)
    return write_weights(scratch, checkpoint.label, policy_state_dict(merged))


def load_into_policy(config: JobConfig, weights: Path, policy_urls: list[str], *,
                     timeout_s: float = 600.0, token: str | None = None) -> int | None:
    """Every policy server loads `weights`; returns the hf server's new version (vLLM: None)."""
    from veri.infra.http import HttpCallError

    try:
        if config.backend == Backend.HF:
            from veri.services.policy.hf.admin_client import PolicyAdmin

            admin = PolicyAdmin(policy_urls[0], timeout_s=timeout_s, token=token)
            try:
                return admin.update_weights(weights.resolve())
            finally:
                admin.close()
        from veri.services.policy.vllm.admin_client import VllmAdmin

        for url in policy_urls:
            server = VllmAdmin(url, timeout_s=timeout_s)
            try:
                server.reload_weights(weights.resolve())
                server.reset_prefix_cache()
            finally:
                server.close()
        return None
    except HttpCallError as error:
        raise EvalError(f"the policy server could not load {weights}: {error}") from error


def _model_folder(folder: Path, what: str) -> Path:
    if not (folder / "config.json").is_file():
        raise EvalError(f"{what} {folder} is not a transformers model folder (no config.json): give the folder"
                        " `save_pretrained` wrote, or --job JOB --step K|final|base")
    return folder


def _steps_text(layout: ArchiveLayout) -> str:
    found = sorted(int(m.group(1)) for p in layout.checkpoints.glob("checkpoint-*")
                   if (m := CHECKPOINT_DIR.match(p.name))) if layout.checkpoints.is_dir() else []
    return f"its checkpoints are at steps {', '.join(map(str, found))}" if found else "it has no checkpoint yet"
