"""A job archive's trained rows -> JSONL lines TRL's `SFTTrainer` takes as a pre-tokenized dataset.

One line per row a training step took (`Episode.rows`: the chain ending at the final answer, then each
branch: sub-agents, side calls, the history before a compaction), read from the archive's rollout records:

    input_ids        the row's prompt ids + completion ids, exactly as sampled and bridged (`core.branches`)
    completion_mask  0 on the prompt and on the environment tokens between turns (tool results, user turns),
                     1 on the tokens the policy sampled: what GRPO trained, and what SFT should
    messages         the row's conversation: its last span's rendered messages + the reply (when recorded)
    job, step, task_index, rollout_index, rollout_id, row (0 = the final chain), row_kind, reward,
    policy_versions  provenance
    prompt, task     the dataset row: its prompt (a Harbor task's instruction.md) and its other columns
                     (a Harbor task's task_name, [metadata] keys and folder)
    verifier         a Harbor task's tests' numbers (reward.json's keys and `reward`); None for other jobs

TRL 1.16 (`SFTTrainer._prepare_dataset`) folds `completion_mask` into `labels` (-100 where 0) only with
`completion_only_loss=True`; `veri sft` always sets it (`export.sft`). A row is exported when its record is
`trainable` (no rule rejected it, it has a reward) and its step is complete (a metrics line: the rollouts of
a step a job stopped in were never trained). A Harbor task's rollout whose tests could not run (verifier_*)
is never exported, whatever reward its record carries: its reward is not the tests' word. An eval archive
(`veri eval`, step 0) exports the rows a training step would have taken: a stronger policy's traces, for
distillation.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veri.archive import ArchiveLayout, read_metrics, read_rollout
from veri.core.dataset import PROMPT
from veri.core.rollout_record import RolloutRecord
from veri.tools.export.errors import ExportError


@dataclass(frozen=True)
class StepRange:
    """Steps start <= s < stop (Python's slice; None: open)."""

    start: int | None = None
    stop: int | None = None

    def __contains__(self, step: object) -> bool:
        if not isinstance(step, int):
            return False
        return (self.start is None or step >= self.start) and (self.stop is None or step < self.stop)

    def __str__(self) -> str:
        return f"{'' if self.start is None else self.start}:{'' if self.stop is None else self.stop}"


def parse_steps(text: str | None) -> StepRange:
    """`a:b` (steps a..b-1), `a:`, `:b` or `K` (step K alone); anything else is an ExportError naming the form."""
    if text is None:
        return StepRange()
    form = "give --steps as a:b (steps a..b-1, Python's slice), a:, :b or one step K, e.g. --steps 2:10"
    start, colon, stop = text.strip().partition(":")
    try:
        first = int(start) if start.strip() else None
        last = int(stop) if stop.strip() else None
    except ValueError:
        raise ExportError(f"--steps {text!r}: not a range of steps; {form}") from None
    if not colon:
        if first is None:
            raise ExportError(f"--steps {text!r}: empty; {form}")
        last = first + 1
    if (first is not None and first < 0) or (last is not None and last < 0):
        raise ExportError(f"--steps {text!r}: steps start at 0; {form}")
    if first is not None and last is not None and last <= first:
        raise ExportError(f"--steps {text!r}: selects no step (b must be greater than a); {form}")
    return StepRange(first, last)


def resolve_job(job: str, jobs_root: Path) -> ArchiveLayout:
    """JOB: a job's folder name under `jobs_root`, or the path of a job (or eval) folder."""
    for folder in (jobs_root / job, Path(job)):
        if (folder / "trajectories").is_dir() or ArchiveLayout(folder).metrics.is_file():
            return ArchiveLayout(folder.resolve())
    if (jobs_root / job).is_dir() or Path(job).is_dir():
        where = jobs_root / job if (jobs_root / job).is_dir() else Path(job)
        raise ExportError(f"{where} is not a job archive (no trajectories/ nor metrics.jsonl): name a folder"
                          f" `veri train` or `veri eval` wrote")
    known = sorted(p.name for p in jobs_root.iterdir() if p.is_dir()) if jobs_root.is_dir() else []
    raise ExportError(f"no job {job!r} in {jobs_root}: jobs there: {', '.join(known) or 'none'}"
                      " (pass --output for another folder of jobs, or the job folder's path)")


@dataclass
class ExportSummary:
    """What an export wrote and what it left out, for the command's report."""

    job: str
    out: Path | None = None
    rows: int = 0
    rollouts: int = 0
    tokens: int = 0
    trained_tokens: int = 0
    steps: list[int] = field(default_factory=list)
    kinds: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)  # why rollouts were left out -> how many
    rewards: list[float] = field(default_factory=list)  # of the exported rollouts

    def as_dict(self) -> dict[str, Any]:
        return {"job": self.job, "out": str(self.out) if self.out else None, "rows": self.rows,
                "rollouts": self.rollouts, "tokens": self.tokens, "trained_tokens": self.trained_tokens,
                "steps": self.steps, "row_kinds": self.kinds, "skipped": self.skipped,
                "reward_min": min(self.rewards, default=None), "reward_max": max(self.rewards, default=None)}

    def text(self) -> str:
        kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(self.kinds.items()))
        steps = f"{self.steps[0]}..{self.steps[-1]}" if self.steps else "none"
        skipped = ", ".join(f"{why} {count}" for why, count in sorted(self.skipped.items())) or "none"
        return "\n".join([
            f"{self.out}: {_count(self.rows, 'row')} ({kinds or 'none'}) from {_count(self.rollouts, 'rollout')}"
            f" of {self.job},"
            f" steps {steps}",
            f"tokens: {self.tokens}, trained (completion_mask 1) {self.trained_tokens}",
            f"rollouts left out: {skipped}",
        ])


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def sft_lines(layout: ArchiveLayout, *, min_reward: float | None = None, min_verifier_reward: float | None = None,
              steps: StepRange | None = None, summary: ExportSummary | None = None) -> Iterator[dict[str, Any]]:
    """The archive's trained rows as SFT lines (module docstring), in step, task, rollout, row order."""
    steps = steps or StepRange()
    summary = summary if summary is not None else ExportSummary(job=layout.dir.name)
    completed = {line["step"] for line in read_metrics(layout.metrics)}

    def skip(why: str) -> None:
        summary.skipped[why] = summary.skipped.get(why, 0) + 1

    for step, path in layout.rollout_files():
        if step not in steps:
            continue
        if step not in completed:
            skip("step_incomplete")
            continue
        try:
            record = read_rollout(path)
        except (OSError, ValueError):
            skip("unreadable")
            continue
        why = left_out_because(record, min_reward=min_reward, min_verifier_reward=min_verifier_reward)
        if why is not None:
            skip(why)
            continue
        assert record.reward is not None and record.reward.reward is not None
        reward = record.reward.reward
        lines = list(record_lines(record, job=layout.dir.name, step=step))
        summary.rollouts += 1
        summary.rewards.append(reward)
        if step not in summary.steps:
            summary.steps.append(step)
        for line in lines:
            summary.rows += 1
            summary.tokens += len(line["input_ids"])
            summary.trained_tokens += sum(line["completion_mask"])
            summary.kinds[line["row_kind"]] = summary.kinds.get(line["row_kind"], 0) + 1
            yield line


def left_out_because(record: RolloutRecord, *, min_reward: float | None = None,
                     min_verifier_reward: float | None = None) -> str | None:
    """Why a completed step's rollout is not exported (the summary's reason), or None: it is."""
    verifier = record.verifier
    if verifier is not None and not verifier.ran:
        # The tests could not say anything: a reward from the job's own functions is not a score of the task.
        return f"verifier_{verifier.error.value}"
    if not record.trainable:
        return "not_trained"
    assert record.reward is not None and record.reward.reward is not None
    if min_reward is not None and not record.reward.reward >= min_reward:
        return "below_min_reward"
    if min_verifier_reward is not None:
        if verifier is None or verifier.reward is None:
            return "no_verifier_reward"
        if not verifier.reward >= min_verifier_reward:
            return "below_min_verifier_reward"
    return None


def record_lines(record: RolloutRecord, *, job: str, step: int) -> Iterator[dict[str, Any]]:
    """One trainable record's rows (`Episode.rows` order: the final chain, then its branches)."""
    episode = record.episode
    by_index = {span.request_index: span for span in record.spans}
    chains: list[tuple[str, list[int], Any]] = []
    if episode.row is not None:
        chains.append((episode.chain_kind.value, episode.chain, episode.row))
    chains += [(b.kind.value, b.spans, b.row) for b in episode.branches if b.row is not None]
    reward = record.reward.reward if record.reward is not None else None
    task = {key: value for key, value in record.task.items() if key != PROMPT}
    for position, (kind, spans, row) in enumerate(chains):
        last = by_index.get(spans[-1]) if spans else None
        messages = [*last.messages, last.reply_message] if last is not None and last.messages else []
        versions = sorted({by_index[i].policy_version for i in spans if i in by_index})
        yield {
            "input_ids": [*row.prompt_ids, *row.completion_ids],
            "completion_mask": [0] * len(row.prompt_ids) + list(row.env_mask),
            "messages": messages,
            "job": job, "step": step, "task_index": record.task_index, "rollout_index": record.rollout_index,
            "rollout_id": record.rollout_id, "row": position, "row_kind": kind,
            "reward": reward if reward is None or math.isfinite(reward) else None, "policy_versions": versions,
            "prompt": record.task.get(PROMPT), "task": task,
            "verifier": record.verifier.scores() if record.verifier is not None else None,
        }


def export_sft(layout: ArchiveLayout, out: Path, *, min_reward: float | None = None,
               min_verifier_reward: float | None = None, steps: StepRange | None = None) -> ExportSummary:
    """Write the selection to `out` (atomically: a reader never sees half a file); an empty one is an ExportError."""
    steps = steps or StepRange()
    for option, value in (("--min-reward", min_reward), ("--min-verifier-reward", min_verifier_reward)):
        if value is not None and not math.isfinite(value):
            raise ExportError(f"{option} {value}: give a finite number (rollouts with a reward >= it are kept)")
    completed = [line["step"] for line in read_metrics(layout.metrics)]
    if not completed:
        raise ExportError(f"{layout.dir.name} has no completed step (no line in {layout.metrics}): a step's rows are"
                          " exported once its metrics line is written; wait for step 0 to finish")
    summary = ExportSummary(job=layout.dir.name, out=out)
    out.parent.mkdir(parents=True, exist_ok=True)
    temp = out.with_name(f".{out.name}.tmp")
    try:
        with open(temp, "w", encoding="utf-8") as handle:
            for line in sft_lines(layout, min_reward=min_reward, min_verifier_reward=min_verifier_reward, steps=steps,
                                  summary=summary):
                handle.write(json.dumps(line, ensure_ascii=False, allow_nan=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        if not summary.rows:
            raise ExportError(_empty(layout, completed, min_reward, min_verifier_reward, steps, summary))
        os.replace(temp, out)
    finally:
        temp.unlink(missing_ok=True)
    return summary


def _empty(layout: ArchiveLayout, completed: list[int], min_reward: float | None, min_verifier_reward: float | None,
           steps: StepRange, summary: ExportSummary) -> str:
    chosen = [step for step in completed if step in steps]
    if not chosen:
        return (f"--steps {steps} selects no completed step of {layout.dir.name}: its completed steps are"
                f" {completed[0]}..{completed[-1]}; widen --steps")
    skipped = ", ".join(f"{why} {count}" for why, count in sorted(summary.skipped.items())) or "no rollouts"
    reward = f" with reward >= {min_reward}" if min_reward is not None else ""
    if min_verifier_reward is not None:
        reward += f" with the tests' reward >= {min_verifier_reward}"
    which = "all steps" if str(steps) == ":" else f"steps {steps}"
    return f"no trained row{reward} in {which} of {layout.dir.name} (rollouts left out: {skipped}): {_fix(summary)}"


def _fix(summary: ExportSummary) -> str:
    """The option to change for an empty export, from why its rollouts were left out."""
    if summary.skipped.get("below_min_reward"):
        return "lower --min-reward"
    if summary.skipped.get("below_min_verifier_reward"):
        return "lower --min-verifier-reward"
    if summary.skipped.get("no_verifier_reward"):
        return ("--min-verifier-reward keeps Harbor tasks' rollouts by their tests' `reward`, and these rollouts have"
                " none (not Harbor tasks, or a reward.json without `reward`): use --min-reward")
    if any(why.startswith("verifier_") for why in summary.skipped):
        return ("the tasks' tests could not run (`veri debug rollout-K.json` says why, with the fix); pick steps"
                " whose rollouts were verified")
    return "pick steps whose rollouts were trained (veri job show / the console name them)"
