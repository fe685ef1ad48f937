"""One eval: a checkpoint's weights into the policy server, then the job's harness on a split's tasks
through the same stack as training (the collector, the sandboxes, the capture proxy, the reward
scorer), `n` samples per task, no training. Its archive is its own folder beside the jobs,
`<output>/<name>/`, laid out as a job's (`ArchiveLayout`: the console and `veri debug` read it), with
every rollout under step 0, one metrics line, and eval.json: what was evaluated and the summary.
An eval never writes into a training job's folder (`_new_archive`).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from veri.archive import ArchiveLayout, JobArchive, step_metrics
from veri.archive.layout import atomic_write
from veri.core.config import JobConfig
from veri.core.dataset import DatasetConfig, read_dataset
from veri.core.problems import ProblemsError
from veri.core.rollout_record import RolloutRecord
from veri.loop.collect.collect import CollectedRollout, GroupCollector
from veri.loop.collect.options import TrainOptions
from veri.loop.collect.stack import check_reachable, check_sampling, launch_settings, rollout_runner
from veri.loop.evals.checkpoints import Checkpoint, load_into_policy, weights_to_load
from veri.loop.evals.errors import EvalError
from veri.loop.evals.summary import summarize
from veri.loop.rewards import RewardInputs, RewardScorer, load_reward_functions
from veri.services.proxy.control_client import ControlClient

Tasks = list[tuple[int, dict[str, Any]]]  # (task index, dataset row)
EVAL_STEP = 0  # every rollout of an eval is filed under step 0 (eval.json says which weights)
EVAL_FILE = ArchiveLayout(Path()).eval_file.name  # eval.json


@dataclass(frozen=True)
class EvalOptions:
    train: TrainOptions  # the stack's URLs, the sandbox, the output root and the eval's folder name
    samples: int  # n per task
    temperature: float | None  # None: the job's sampling.temperature
    tasks: str | None = None  # "a:b" over the job's dataset
    split: Path | None = None  # a JSONL of tasks instead
    k: int | None = None  # pass@k's k (default: n)
    held_out_of: Path | None = None  # a training job's folder: leave out the tasks it trained on
    pass_threshold: float = 1.0


def select_tasks(config: JobConfig, tasks: str | None, split: Path | None) -> Tasks:
    """(task index, row): the job's dataset sliced by `tasks` ("a:b", Python's slice), or the split's rows (a
    JSONL file, or a folder of Harbor tasks)."""
    if tasks is not None and split is not None:
        raise EvalError("give --tasks a:b or --split FILE, not both")
    if split is None:
        spec = config.dataset
    elif split.is_dir():  # a Harbor task folder, or a folder of them (a held-out split of a `harbor:` dataset)
        spec = DatasetConfig(harbor=split)
    else:
        spec = DatasetConfig(path=split, column_mapping=config.dataset.column_mapping)
    try:
        rows = read_dataset(spec)
    except ProblemsError as error:
        where = "--split" if split is not None else "the job's dataset"
        raise EvalError(f"{where}: {error}") from error
    indexed = list(enumerate(rows))
    if tasks is None:
        return indexed
    try:
        start, _, stop = tasks.partition(":")
        if not _:
            raise ValueError
        chosen = indexed[slice(int(start) if start else None, int(stop) if stop else None)]
    except ValueError as error:
        raise EvalError(f"--tasks {tasks!r}: give a range a:b of task indexes (e.g. 0:32, 100:)") from error
    if not chosen:
        raise EvalError(f"--tasks {tasks} selects no task: the dataset has {len(rows)} rows"
                        f" (indexes 0..{len(rows) - 1})")
    return chosen


def held_out(tasks: Tasks, job_dir: Path, *, split: bool) -> Tasks:
    """The tasks the job at `job_dir` never trained on (by dataset index: its archive's task indexes)."""
    from veri.archive import ArchiveIndex

    if split:
        raise EvalError("--held-out leaves out the job dataset's rows the job trained on: use it with --tasks (or"
                        " neither), not --split (a split file's rows have their own indexes)")
    if not ArchiveLayout(job_dir).index.is_file():
        raise EvalError(f"--held-out: {job_dir} has no archive index (index.sqlite): it never ran a step")
    with ArchiveIndex(job_dir) as index:
        trained = set(index.task_indexes())
    kept = [(i, row) for i, row in tasks if i not in trained]
    if not kept:
        raise EvalError(f"--held-out: the job trained on every selected task ({len(tasks)}): widen --tasks")
    return kept


def run_eval(config: JobConfig, checkpoint: Checkpoint, options: EvalOptions) -> dict[str, Any]:
    """Run the eval; returns its summary (also in <archive>/eval.json)."""
    train = options.train
    if options.samples < 1:
        raise EvalError(f"-n {options.samples}: give at least 1 sample per task")
    k = options.k or options.samples
    if not 1 <= k <= options.samples:
        raise EvalError(f"-k {k}: pass@k needs 1 <= k <= n ({options.samples} samples per task)")
    temperature = config.sampling.temperature if options.temperature is None else options.temperature
    tasks = select_tasks(config, options.tasks, options.split)
    if options.held_out_of is not None:
        tasks = held_out(tasks, options.held_out_of, split=options.split is not None)
    functions = load_reward_functions(config.rewards, sorted({key for _, row in tasks for key in row}))
    settings = launch_settings(config, train)
    check_reachable(train)
    check_sampling(train, config, temperature=options.temperature)
    control = ControlClient(train.proxy_url, token=train.control_token)
    layout = _new_archive(train.output_root, train.job_name)
    from veri.infra.quiet import quiet_libraries

    # The libraries' noise goes to the eval's own log, only once that folder is known to be new.
    with quiet_libraries(layout.libraries_log), JobArchive(train.output_root, train.job_name) as archive:
        weights = weights_to_load(checkpoint, config, layout.weights, shared=train.output_root)
        version = load_into_policy(config, weights, train.policy_urls, token=train.control_token)
        if weights.is_relative_to(layout.weights):  # a copy made for the server, which holds the weights now
            shutil.rmtree(weights, ignore_errors=True)
            weights = checkpoint.folder
        described = {"job": checkpoint.job, "checkpoint": checkpoint.label, "step": checkpoint.step,
                     "weights": str(weights), "config": config.model_dump(mode="json"),
                     "samples_per_task": options.samples,
                     "temperature": temperature, "tasks": options.tasks, "split": str(options.split) if options.split
                     else None, "policy_version": version}
        archive.start_job(model=str(checkpoint.folder), max_steps=1, config={**described["config"], "eval": {
            k: v for k, v in described.items() if k != "config"}})
        archive.log(f"eval {train.job_name}: {checkpoint.label} ({weights}) on {len(tasks)} tasks x {options.samples},"
                    f" temperature {temperature:g}, policy version {version}")
        from transformers import AutoTokenizer

        collector = GroupCollector(control, rollout_runner(train, layout.outputs), settings,
                                   max_response_length=config.max_response_length,
                                   decoder=AutoTokenizer.from_pretrained(config.model))
        with RewardScorer(functions, config.reward_timeout_s) as scorer:
            records, figures = evaluate_served(collector, scorer, archive, tasks, samples=options.samples,
                                               max_parallel=config.max_parallel_rollouts,
                                               reward_names=[f.name for f in functions], k=k,
                                               pass_threshold=options.pass_threshold)
        summary = {"name": train.job_name, "archive": str(layout.dir), **{k: v for k, v in described.items()
                                                                            if k != "config"}, **figures}
        atomic_write(layout.eval_file, json.dumps(summary, indent=1).encode())
        failed = [(r, v) for r in records if r.reward is not None for v in r.reward.verdicts]
        if failed:
            record, verdict = failed[0]
            where = layout.rollout_path(EVAL_STEP, record.task_index, record.rollout_index)
            raise EvalError(f"{len(failed)} reward call(s) failed, so the figures would leave those samples out:"
                            f" {verdict.message} (task {record.task_index}, rollout {record.rollout_index}); fix the"
                            f" function (`veri debug {where}` shows the traceback) and run the eval again")
        archive.log(f"eval done: reward mean {summary['reward_mean']}")
    return summary


def evaluate_served(collector: GroupCollector, scorer: RewardScorer, archive: JobArchive, tasks: Tasks, *,
                    samples: int, max_parallel: int, reward_names: list[str], k: int,
                    pass_threshold: float = 1.0) -> tuple[list[RolloutRecord], dict[str, Any]]:
    """The policy as served now on `tasks` (`samples` each): rollouts scored and archived under step 0 of
    `archive`, its one metrics line; returns the records and the figures (`summarize`). `veri eval` and
    training's `eval_every` both run this."""
    started = time.monotonic()
    collected = asyncio.run(_collect(collector, tasks, samples, max_parallel))
    rolled = time.monotonic()
    records = _score(scorer, collected, archive)
    from veri.loop.collect.collect import harness_log, verifier_files

    for record, rollout in zip(records, collected, strict=True):
        archive.write_rollout(EVAL_STEP, record, harness_log=harness_log(rollout),
                              verifier_files=verifier_files(rollout))
    archive.write_step_metrics(EVAL_STEP, step_metrics(records, {"rollout": rolled - started,
                                                                 "reward": time.monotonic() - rolled}))
    return records, summarize(records, reward_names, k=k, pass_threshold=pass_threshold)


def new_eval_archive(root: Path, name: str) -> ArchiveLayout:
    """The layout of a new eval archive `<root>/<name>/`; EvalError when that folder holds anything."""
    return _new_archive(root, name)


def read_eval(folder: Path) -> dict[str, Any]:
    """An eval archive's summary (eval.json); EvalError when `folder` is not one."""
    path = Path(folder) / EVAL_FILE
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError) as error:
        raise EvalError(f"{folder} is not an eval archive (no readable {EVAL_FILE}): give the folder `veri eval`"
                        " printed, or a checkpoint") from error


def is_eval_archive(folder: Path) -> bool:
    return (Path(folder) / EVAL_FILE).is_file()


def _new_archive(root: Path, name: str) -> ArchiveLayout:
    from veri.archive import job_layout
    from veri.archive.errors import JobError

    try:
        layout = job_layout(root, name)
    except JobError as error:
        raise EvalError(f"--name: {error}") from error
    if layout.dir.exists() and any(layout.dir.iterdir()):
        what = "an earlier eval" if is_eval_archive(layout.dir) else "a training job's folder"
        raise EvalError(f"{layout.dir} is {what}: an eval writes only a new folder; pass another --name")
    return layout


async def _collect(collector: GroupCollector, tasks: Tasks, samples: int,
                   max_parallel: int) -> list[CollectedRollout]:
    gate = asyncio.Semaphore(max(1, max_parallel // samples))  # tasks' groups at once, as training runs them

    async def one(task_index: int, task: dict[str, Any]) -> list[CollectedRollout]:
        async with gate:
            return await collector.collect(step=EVAL_STEP, task_index=task_index, task=task, size=samples)

    groups = await asyncio.gather(*(one(index, row) for index, row in tasks))
    return [rollout for group in groups for rollout in group]


def _score(scorer: RewardScorer, collected: list[CollectedRollout], archive: JobArchive) -> list[RolloutRecord]:
    """Every rollout no rule rejected gets the job's reward functions; the rejected keep reward None."""
    to_score = [c for c in collected if not c.record.episode.rejected]
    inputs = [RewardInputs.from_record(c.record, outputs=c.output_dir, trainer_state=None,
                                       log_metric=lambda name, value: None,
                                       log_extra=lambda column, values: None) for c in to_score]
    outcomes = dict(zip((c.record.rollout_id for c in to_score), scorer.score_many(inputs), strict=True))
    return [c.record.model_copy(update={"reward": outcomes[c.record.rollout_id]})
            if c.record.rollout_id in outcomes else c.record for c in collected]
