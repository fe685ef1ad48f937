"""`eval_every: K`: after every K trained steps (and their weight sync, so the policy serves the new
weights) the job's `eval_dataset` runs through the harness with no training, exactly as `veri eval`
runs it (`evals.run.evaluate_served`). Its figures go into that step's metrics line (`eval/...`, next
to the training reward) and its rollouts into an eval archive beside the job, `<job>-eval-step-<N>`
(N: the policy version evaluated), which the console lists on the job page like any eval of the job.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from veri.archive import JobArchive
from veri.archive.layout import atomic_write
from veri.core.config import JobConfig
from veri.core.dataset import read_dataset
from veri.loop.collect.collect import GroupCollector, LaunchSettings
from veri.loop.collect.stack import rollout_runner
from veri.loop.rewards import RewardScorer
from veri.services.proxy.control_client import ControlClient
from veri.services.trainer.grpo import trl_internals
from veri.services.trainer.ui.progress import StepProgress

if TYPE_CHECKING:
    from veri.loop.collect.options import TrainOptions

EVAL_PREFIX = "eval/"


def sync_now(trainer: Any) -> None:
    """The weights to the policy now, as TRL does before its next generation (which then skips it): with
    vLLM TRL syncs at the start of a step, through the seat that also announces the version to the proxy
    (`weights.vllm_sync.AnnouncedSync`: the eval's spans carry the version evaluated); the hf backend has
    pushed them already (its callback)."""
    trl_internals.sync_weights_now(trainer)


def eval_name(job: str, version: int) -> str:
    return f"{job}-eval-step-{version}"


class PeriodicEval(TrainerCallback):
    """Register after the weight sync and before the step metrics (`StepMetricsCallback`)."""

    def __init__(self, config: JobConfig, options: TrainOptions, settings: LaunchSettings, progress: StepProgress,
                 control: ControlClient, scorer: RewardScorer, reward_names: list[str], decoder: Any,
                 report: Any) -> None:
        assert config.eval_dataset is not None and config.eval_every > 0
        self.config, self.options, self.settings = config, options, settings
        self.progress, self.control, self.scorer = progress, control, scorer
        self.reward_names, self.decoder, self.report = reward_names, decoder, report
        self.tasks = list(enumerate(read_dataset(config.eval_dataset)))
        self.trainer: Any = None  # set once TRL's trainer exists (job.py): the weights must reach the policy first

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any) -> None:
        step = self.progress.current
        if step is None or (step.step + 1) % self.config.eval_every:
            return
        version = step.step + 1  # the weights trained by steps 0..step
        if self.trainer is not None:
            sync_now(self.trainer)
        started = time.monotonic()
        summary = self._evaluate(version)
        self.progress.timing("eval", time.monotonic() - started)
        if summary is None:
            return
        figures: dict[str, float | int] = {f"{EVAL_PREFIX}policy_version": version,
                                           f"{EVAL_PREFIX}rollouts": summary["rollouts"]}
        for name in summary["functions"]:
            for key in ("reward_mean", "pass_at_1"):
                value = summary[key].get(name)
                if value is not None:
                    figures[f"{EVAL_PREFIX}{name}/{key.removeprefix('reward_')}"] = value
        step.extra.update(figures)
        self.report(f"eval after step {step.step} (policy version {version}): reward mean "
                    f"{summary['reward_mean'].get('reward')} on {len(self.tasks)} held-out tasks"
                    f" -> {summary['archive']}")

    def _evaluate(self, version: int) -> dict[str, Any] | None:
        from veri.loop.evals.errors import EvalError
        from veri.loop.evals.run import evaluate_served, new_eval_archive

        name = eval_name(self.options.job_name, version)
        try:
            layout = new_eval_archive(self.options.output_root, name)
        except EvalError as error:  # a resumed job re-running a step: the first eval of that version stands
            self.report(f"eval of policy version {version} skipped: {error}")
            return None
        options = dataclasses.replace(self.options, job_name=name)
        collector = GroupCollector(self.control, rollout_runner(options, layout.outputs), self.settings,
                                   max_response_length=self.config.max_response_length, decoder=self.decoder)
        with JobArchive(self.options.output_root, name) as archive:
            described = {"job": self.options.job_name, "checkpoint": f"step {version} (eval_every)",
                         "step": version, "samples_per_task": self.config.eval_samples,
                         "temperature": self.config.sampling.temperature, "tasks": None,
                         "split": str(self.config.eval_dataset.source) if self.config.eval_dataset else None,
                         "policy_version": version}
            archive.start_job(model=self.options.job_name, max_steps=1,
                              config={**self.config.model_dump(mode="json"), "eval": described})
            _, figures = evaluate_served(collector, self.scorer, archive, self.tasks,
                                         samples=self.config.eval_samples,
                                         max_parallel=self.config.max_parallel_rollouts,
                                         reward_names=self.reward_names, k=self.config.eval_samples)
            summary = {"name": name, "archive": str(layout.dir), **described, **figures}
            atomic_write(layout.eval_file, json.dumps(summary, indent=1).encode())
        return summary
