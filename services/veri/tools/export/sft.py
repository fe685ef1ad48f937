"""`veri sft CONFIG`: TRL's SFTTrainer on `veri export sft` lines, a warm start before GRPO.

The config (YAML or TOML, same keys; unknown keys refused):

    model: build/models/tiny            the transformers folder to start from
    dataset: build/exports/job.sft.jsonl  one file or a list of `veri export sft` files
    output_dir: build/sft/job           the fine-tuned model (a transformers folder) and sft.json
    epochs: 1                           learning_rate: 1.0e-5     batch_size: 4
    gradient_accumulation_steps: 1      max_steps: -1 (epochs decide)   max_length: null (no cut)
    seed: 0                             use_cpu: true             logging_steps: 1

Relative paths are the current folder's. Only `input_ids` and `completion_mask` are read from each line;
TRL builds `labels` from them (-100 where the mask is 0) because `completion_only_loss=True` is always set
here: TRL 1.16 ignores `completion_mask` without it and would train on the prompt and the environment's
tokens (tool results, user turns) too. `output_dir/sft.json` records the run: the data, each logged loss,
the first and last, and the model folder.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from veri.core.config import read_config_file
from veri.core.problems import Problem, ProblemsError
from veri.tools.export.errors import ExportError

SUMMARY_FILE = "sft.json"


class SftConfig(BaseModel):
    """What `veri sft` fine-tunes, on what, and how."""

    model_config = ConfigDict(extra="forbid")

    model: Path = Field(description="the transformers model folder to start from (config.json, weights, tokenizer)")
    dataset: list[Path] = Field(min_length=1, description="`veri export sft` JSONL file(s)")
    output_dir: Path = Field(description="where the fine-tuned model and sft.json are written")
    epochs: float = Field(default=1.0, gt=0, description="passes over the dataset (TRL's num_train_epochs)")
    learning_rate: float = Field(default=1e-5, gt=0, description="AdamW's peak learning rate")
    batch_size: int = Field(default=4, ge=1, description="rows per device per step")
    gradient_accumulation_steps: int = Field(default=1, ge=1, description="batches per optimizer step")
    max_steps: int = Field(default=-1, ge=-1, description="optimizer steps; -1: as many as `epochs` make")
    max_length: int | None = Field(default=None, ge=2, description="cut rows to this many tokens (None: no cut)")
    warmup_steps: int = Field(default=0, ge=0, description="linear warm-up steps")
    seed: int = Field(default=0, description="data order and initialisation seed")
    use_cpu: bool = Field(default=True, description="train on the CPU (false: the GPU accelerate finds)")
    logging_steps: int = Field(default=1, ge=1, description="a loss line every N optimizer steps")

    @field_validator("dataset", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str | Path) else value


def load_sft_config(path: Path) -> SftConfig:
    """Read and check a `veri sft` config; every problem at once (ProblemsError), paths resolved from cwd."""
    raw = read_config_file(path)
    try:
        config = SftConfig.model_validate(raw)
    except ValidationError as error:
        raise ProblemsError(str(path), [_problem(item) for item in error.errors()]) from None
    problems = []
    if not (config.model / "config.json").is_file():
        problems.append(Problem("model", f"{config.model} is not a transformers model folder (no config.json)",
                                "set `model` to a folder save_pretrained wrote (e.g. a job's model/)"))
    for position, file in enumerate(config.dataset):
        if not file.is_file():
            problems.append(Problem(f"dataset[{position}]" if len(config.dataset) > 1 else "dataset",
                                    f"{file} does not exist", "write it with `veri export sft JOB --out FILE`"))
    if problems:
        raise ProblemsError(str(path), problems)
    return config.model_copy(update={
        "model": config.model.resolve(), "output_dir": config.output_dir.resolve(),
        "dataset": [file.resolve() for file in config.dataset]})


def _problem(error: Any) -> Problem:
    where = ".".join(str(part) for part in error["loc"])
    if error["type"] == "extra_forbidden":
        known = ", ".join(SftConfig.model_fields)
        return Problem(where, "is not a known key", f"remove it; the keys are: {known}")
    if error["type"] == "missing":
        info = SftConfig.model_fields.get(str(error["loc"][0]))
        return Problem(where, "is required", f"add `{where}` ({info.description if info else ''})")
    return Problem(where, error["msg"], f"change `{where}`")


def read_rows(files: list[Path], *, vocab_size: int | None = None) -> dict[str, list[list[int]]]:
    """`input_ids` and `completion_mask` of every line; a line that is not an export's is an ExportError."""
    rows: dict[str, list[list[int]]] = {"input_ids": [], "completion_mask": []}
    for file in files:
        with open(file, encoding="utf-8") as handle:
            for number, text in enumerate(handle, start=1):
                if not text.strip():
                    continue
                where = f"{file}:{number}"
                try:
                    line = json.loads(text)
                    ids, mask = line["input_ids"], line["completion_mask"]
                except (ValueError, KeyError, TypeError):
                    raise ExportError(f"{where}: not a `veri export sft` line (JSON with input_ids and"
                                      " completion_mask); export the job again") from None
                if not ids or len(ids) != len(mask) or not all(isinstance(i, int) for i in ids):
                    raise ExportError(f"{where}: input_ids and completion_mask must be lists of ints of one length")
                if vocab_size is not None and max(ids) >= vocab_size:
                    raise ExportError(f"{where}: token id {max(ids)} is outside the model's vocabulary"
                                      f" ({vocab_size}): fine-tune the model (or a model with the tokenizer) whose"
                                      " job sampled these rows")
                rows["input_ids"].append(ids)
                rows["completion_mask"].append([1 if bit else 0 for bit in mask])
    if not rows["input_ids"]:
        raise ExportError(f"{', '.join(map(str, files))}: no rows; export a job's rows with `veri export sft JOB`")
    return rows


def sft_trainer(config: SftConfig, rows: dict[str, list[list[int]]] | None = None) -> Any:
    """TRL's SFTTrainer for `config`, on its dataset (or `rows`), labels built from completion_mask."""
    from datasets import Dataset
    from transformers import AutoConfig, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    tokenizer = AutoTokenizer.from_pretrained(config.model)
    if rows is None:
        vocab = getattr(AutoConfig.from_pretrained(config.model).get_text_config(), "vocab_size", None)
        rows = read_rows(config.dataset, vocab_size=vocab)
    args = SFTConfig(
        output_dir=str(config.output_dir), num_train_epochs=config.epochs, learning_rate=config.learning_rate,
        per_device_train_batch_size=config.batch_size,
        gradient_accumulation_steps=config.gradient_accumulation_steps, max_steps=config.max_steps,
        max_length=config.max_length, warmup_steps=config.warmup_steps, seed=config.seed, use_cpu=config.use_cpu,
        logging_steps=config.logging_steps, completion_only_loss=True, report_to="none", save_strategy="no",
        disable_tqdm=True, bf16=False,
    )
    return SFTTrainer(model=str(config.model), args=args, train_dataset=Dataset.from_dict(rows),
                      processing_class=tokenizer)


def run_sft(config: SftConfig, *, log: Any = print) -> dict[str, Any]:
    """Fine-tune, save the model into `output_dir`, write sft.json; returns what sft.json holds."""
    import datasets
    from transformers import PrinterCallback, TrainerCallback

    from veri.infra.quiet import quiet_libraries

    class StepLines(TrainerCallback):  # one line per logged step instead of the Trainer's printed dicts
        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **_: Any) -> None:
            if logs and "loss" in logs:
                log(f"veri sft: step {state.global_step}/{state.max_steps} loss {float(logs['loss']):.4f}")

    config.output_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    bars = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    with quiet_libraries(config.output_dir / "libraries.log"):
        try:
            trainer = sft_trainer(config)
        finally:
            if bars:
                datasets.enable_progress_bars()
        trainer.remove_callback(PrinterCallback)
        trainer.add_callback(StepLines())
        dataset = trainer.train_dataset
        log(f"veri sft: {len(dataset)} rows, {sum(len(ids) for ids in dataset['input_ids'])} tokens,"
            f" {sum(sum(label != -100 for label in labels) for labels in dataset['labels'])} trained;"
            f" {config.model} -> {config.output_dir}")
        trainer.train()
        trainer.save_model(str(config.output_dir))
    losses = [{"step": item["step"], "loss": item["loss"]} for item in trainer.state.log_history if "loss" in item]
    summary = {
        "model": str(config.model), "dataset": [str(file) for file in config.dataset],
        "output_dir": str(config.output_dir), "rows": len(dataset), "steps": trainer.state.global_step,
        "losses": losses, "first_loss": losses[0]["loss"] if losses else None,
        "last_loss": losses[-1]["loss"] if losses else None, "seconds": round(time.time() - started, 2),
        "config": json.loads(config.model_dump_json()),
    }
    (config.output_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    if losses:
        log(f"veri sft: {trainer.state.global_step} steps, loss {losses[0]['loss']:.4f} -> {losses[-1]['loss']:.4f};"
            f" the model is in {config.output_dir}")
    return summary
