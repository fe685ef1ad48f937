"""The detectors. Each reads what the archive already holds (metrics.jsonl lines, the index's rollout
rows, the rollouts' output folders) and returns the signals it raised, each with the step, a sentence a
user can act on and the rollouts that raised it. Pure functions over those inputs, so each is tested
on a constructed archive; `detect_archive` gathers the inputs of one job folder.

    held_out_falling       training reward up while the held-out eval (eval_every) goes down
    answer_collapse        one final answer across many different tasks in one step
    length_drift           sampled tokens per rollout far from the first steps'
    parse_failures_rising  tool calls the renderer could not parse, up from the first steps'
    unexpected_outputs     files in a rollout's output folder (the reward's inputs) outside signals.expected_outputs
    verifier_failures      Harbor tasks' verifiers that could not run (no reward file, timeout, error), per step
"""

from __future__ import annotations

import fnmatch
import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from veri.core.signals import SignalsConfig

MAX_ROLLOUTS = 20  # rollouts named per signal (the console links each)
Rows = list[dict[str, Any]]  # index rows: step, task_index, rollout_index, rollout_id, final_answer, ...


@dataclass(frozen=True)
class Raised:
    signal: str
    step: int
    message: str
    rollouts: list[dict[str, Any]] = field(default_factory=list)  # {step, task_index, rollout_index, rollout_id}

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ref(row: dict[str, Any]) -> dict[str, Any]:
    return {key: row[key] for key in ("step", "task_index", "rollout_index", "rollout_id")}


def _baseline(lines: list[dict[str, Any]], key: str, steps: int) -> float | None:
    values = [line[key] for line in lines[:steps] if isinstance(line.get(key), (int, float))]
    return statistics.fmean(values) if values else None


def held_out_falling(lines: list[dict[str, Any]], config: SignalsConfig) -> list[Raised]:
    evals = [line for line in lines if isinstance(line.get("eval/reward/mean"), (int, float))
             and isinstance(line.get("reward/mean"), (int, float))]
    raised = []
    for before, after in zip(evals, evals[1:], strict=False):
        train_rise = after["reward/mean"] - before["reward/mean"]
        held_fall = before["eval/reward/mean"] - after["eval/reward/mean"]
        if train_rise >= config.eval_gap and held_fall >= config.eval_gap:
            raised.append(Raised("held_out_falling", after["step"],
                                 f"training reward rose {train_rise:+.3f} (step {before['step']} -> {after['step']})"
                                 f" while the held-out reward fell {-held_fall:+.3f}: the policy may be fitting the"
                                 " reward, not the task; read the training rollouts whose reward rose"))
    return raised


def answer_collapse(rows: Rows, config: SignalsConfig) -> list[Raised]:
    raised = []
    for step in sorted({row["step"] for row in rows}):
        in_step = [row for row in rows if row["step"] == step and row.get("final_answer", "").strip()]
        if not in_step:
            continue
        answer, count = Counter(row["final_answer"].strip() for row in in_step).most_common(1)[0]
        same = [row for row in in_step if row["final_answer"].strip() == answer]
        tasks = {row["task_index"] for row in same}
        if count / len(in_step) >= config.answer_share and len(tasks) >= config.answer_min_tasks:
            raised.append(Raised("answer_collapse", step,
                                 f"{count} of {len(in_step)} rollouts over {len(tasks)} different tasks end with the"
                                 f" same answer {answer[:80]!r}: a reward that one answer satisfies everywhere",
                                 [_ref(row) for row in same[:MAX_ROLLOUTS]]))
    return raised


def length_drift(lines: list[dict[str, Any]], rows: Rows, config: SignalsConfig) -> list[Raised]:
    per_rollout = [{**line, "sampled_per_rollout": line["tokens/completion"] / line["rollouts"]} for line in lines
                   if line.get("rollouts") and isinstance(line.get("tokens/completion"), (int, float))]
    if len(per_rollout) <= config.baseline_steps:
        return []
    base = _baseline(per_rollout, "sampled_per_rollout", config.baseline_steps)
    if not base:
        return []
    raised = []
    for line in per_rollout[config.baseline_steps:]:
        ratio = line["sampled_per_rollout"] / base
        if ratio >= config.length_ratio or ratio <= 1 / config.length_ratio:
            longest = sorted((row for row in rows if row["step"] == line["step"]),
                             key=lambda row: row.get("completion_tokens", 0), reverse=ratio >= 1)
            raised.append(Raised("length_drift", line["step"],
                                 f"{line['sampled_per_rollout']:.0f} sampled tokens per rollout, {ratio:.2f}x the first"
                                 f" {config.baseline_steps} steps' {base:.0f}: a reward that pays for length (or its"
                                 " absence)", [_ref(row) for row in longest[:MAX_ROLLOUTS]]))
    return raised


def parse_failures_rising(lines: list[dict[str, Any]], config: SignalsConfig) -> list[Raised]:
    key = "tool_calls/parse_failure_rate"
    with_rate = [line for line in lines if isinstance(line.get(key), (int, float))]
    if len(with_rate) <= config.baseline_steps:
        return []
    base = _baseline(with_rate, key, config.baseline_steps) or 0.0
    return [Raised("parse_failures_rising", line["step"],
                   f"tool-call parse failures {line[key]:.0%} of calls, up from {base:.0%} in the first"
                   f" {config.baseline_steps} steps: tool use is degrading (it precedes reward collapse)")
            for line in with_rate[config.baseline_steps:] if line[key] - base >= config.parse_failure_rise]


def unexpected_outputs(rows: Rows, config: SignalsConfig,
                       outputs_of: Callable[[dict[str, Any]], list[str] | None]) -> list[Raised]:
    """`outputs_of(row)`: the files (relative paths) in that rollout's output folder, None when not found."""
    if config.expected_outputs is None:
        return []
    by_step: dict[int, list[tuple[dict[str, Any], list[str]]]] = {}
    for row in rows:
        files = outputs_of(row) or []
        patterns = config.expected_outputs
        extra = [name for name in files if not any(fnmatch.fnmatch(name, pattern) for pattern in patterns)]
        if extra:
            by_step.setdefault(row["step"], []).append((row, extra))
    return [Raised("unexpected_outputs", step,
                   f"{len(found)} rollouts wrote files the task does not expect (e.g. {', '.join(found[0][1][:3])}):"
                   f" the reward reads that folder; expected {', '.join(config.expected_outputs)}",
                   [_ref(row) for row, _ in found[:MAX_ROLLOUTS]])
            for step, found in sorted(by_step.items())]


VERIFIER_FAILURES = {"verifier_no_reward": "no reward file", "verifier_timeout": "timed out",
                     "verifier_error": "error"}  # the rules core/episodes.py gives a verifier that could not run


def verifier_failures(rows: Rows) -> list[Raised]:
    """Per step, the rollouts whose task verifier said nothing: each is rejected (never a 0), so many of them
    shrink the step's groups, and an agent that breaks its tests (kills test.sh, fills the disk) hides here."""
    by_step: dict[int, list[tuple[dict[str, Any], str]]] = {}
    for row in rows:
        rules = row.get("verdicts") or []  # the index reader's list of rule names
        rules = rules.split(",") if isinstance(rules, str) else rules
        if failed := next((rule for rule in rules if rule in VERIFIER_FAILURES), None):
            by_step.setdefault(row["step"], []).append((row, failed))
    raised = []
    for step, found in sorted(by_step.items()):
        kinds = Counter(rule for _, rule in found)
        counted = ", ".join(f"{count} {VERIFIER_FAILURES[rule]}" for rule, count in sorted(kinds.items()))
        total = sum(1 for row in rows if row["step"] == step)
        raised.append(Raised("verifier_failures", step,
                             f"{len(found)} of {total} rollouts' task verifiers could not run ({counted}): they"
                             " are rejected, not scored; read their verifier output (an agent that breaks its"
                             " tests, or a task whose test.sh fails on its own)",
                             [_ref(row) for row, _ in found[:MAX_ROLLOUTS]]))
    return raised


def detect(lines: list[dict[str, Any]], rows: Rows, config: SignalsConfig,
           outputs_of: Callable[[dict[str, Any]], list[str] | None] = lambda row: None) -> list[Raised]:
    """Every signal over the job's completed steps, by step."""
    found = [*held_out_falling(lines, config), *answer_collapse(rows, config), *length_drift(lines, rows, config),
             *parse_failures_rising(lines, config), *unexpected_outputs(rows, config, outputs_of),
             *verifier_failures(rows)]
    return sorted(found, key=lambda raised: (raised.step, raised.signal))


def detect_archive(job_dir: Path, config: SignalsConfig, *, output_roots: list[Path] | None = None) -> list[Raised]:
    """The signals of the job folder `job_dir` (its metrics, index and output folders)."""
    from veri.archive import ArchiveIndex, ArchiveLayout, read_metrics

    layout = ArchiveLayout(job_dir)
    lines = read_metrics(layout.metrics)
    done = {line["step"] for line in lines}
    rows: Rows = []
    if layout.index.is_file():
        with ArchiveIndex(job_dir) as index:
            for step in sorted(done):
                rows += index.rollouts(step=step, limit=100_000)
    roots = [layout.outputs, *(output_roots or [])]

    def outputs_of(row: dict[str, Any]) -> list[str] | None:
        for root in roots:
            folder = root / row["rollout_id"]
            if folder.is_dir():
                return sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file())
        return None

    return detect(lines, rows, config, outputs_of)
