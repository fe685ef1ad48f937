"""One training job, start to end: the pieces built once, TRL's loop run, the final model saved.

The job's folder is <output_root>/<job_name>/, laid out by `archive.layout.ArchiveLayout` (archive,
checkpoints, the weights the policy servers load, which they must see at the same path, outputs, the
final model). The policy server and the capture proxy run already (their URLs come in `TrainOptions`); the proxy
must sample with the job's sampling settings and max_tokens_per_call (they are not sent per call): checked at
start (rollouts/stack.py `check_sampling`).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from veri.archive import ArchiveLayout, JobArchive, latest_checkpoint, prepare_resume
from veri.core import envs
from veri.core.config import Backend, JobConfig
from veri.core.dataset import read_dataset
from veri.gpu.job import plan_job
from veri.gpu.planner import GpuLayout, LayoutError, WeightSync, plan_from_env
from veri.infra.http import HttpCallError
from veri.loop.collect.collect import GroupCollector, LaunchSettings
from veri.loop.collect.options import TrainOptions
from veri.loop.collect.stack import check_reachable, check_sampling, launch_settings, rollout_runner
from veri.loop.rewards import RewardScorer, load_reward_functions
from veri.services.policy.hf.admin_client import PolicyAdmin
from veri.services.policy.vllm.admin_client import VllmAdmin
from veri.services.proxy.control_client import ControlClient
from veri.services.trainer.errors import JobError
from veri.services.trainer.gpu_stack import gpu_stack_problems
from veri.services.trainer.grpo import trl_internals
from veri.services.trainer.grpo.config import masks_truncated
from veri.services.trainer.grpo.rewards import trl_reward_funcs
from veri.services.trainer.grpo.rollout_func import HarnessRollouts
from veri.services.trainer.grpo.rows import MaskedRow
from veri.services.trainer.grpo.setup import build_trainer, grpo_config_kwargs, seat_weight_sync
from veri.services.trainer.metrics import TrainerMetrics, observed, serve_trainer_metrics
from veri.services.trainer.periodic_eval import PeriodicEval
from veri.services.trainer.schedule.producer import GroupSchedule
from veri.services.trainer.schedule.tasks import trl_dataset
from veri.services.trainer.timeline.recorder import StepTimeline, TrainerPhases, running_calls
from veri.services.trainer.ui.bars import TrainingBars, use_bars
from veri.services.trainer.ui.progress import StepMetricsCallback, StepProgress
from veri.services.trainer.weights.served import ServedWeights, ServerProbe
from veri.services.trainer.weights.sync import HfWeightSync, PolicyVersions, PushedAfterEachStep, announce_version
from veri.services.trainer.weights.vllm_sync import AnnouncedSync, FilesystemSync, PausedSync, TimedSync, release_held

# max_staleness >= 1: a step waits for the groups due at it, but not for one running past twice the harness
# timeout (the launcher should have killed it by then): that one is dropped if stale when it ends.
STRAGGLER_HOLD_TIMEOUTS = 2


def run_job(config: JobConfig, options: TrainOptions) -> Path:
    """Train; returns the final model folder. The job's metrics are served meanwhile when asked."""
    with serve_trainer_metrics(options.metrics_host, options.metrics_port) as metrics:
        return _run_job(config, options, metrics)


def _run_job(config: JobConfig, options: TrainOptions, metrics: TrainerMetrics | None) -> Path:
    if config.backend == Backend.VLLM and (problems := gpu_stack_problems()):
        raise JobError("the vLLM backend needs the GPU stack's versions:\n  " + "\n  ".join(problems))
    plan = _plan(config) if config.backend == Backend.VLLM else None
    settings = launch_settings(config, options)
    check_reachable(options)
    check_sampling(options, config)
    with JobArchive(options.output_root, options.job_name) as archive:
        folders = archive.layout
        checkpoint = _line_up(archive, folders, options.resume)
        archive.log(f"job {options.job_name}: backend {config.backend}, sandbox {options.sandbox},"
                    f" proxy {options.proxy_url}, policy {', '.join(options.policy_urls)}")
        if plan is not None:
            archive.log("GPU plan: " + plan.describe())
        archive.start_job(model=str(config.model), max_steps=config.max_steps, config=config.model_dump(mode="json"))
        trainer = _train(config, options, settings, archive, folders, checkpoint, plan, metrics)
        final = _save_final(trainer, folders.model)
        archive.log(f"done: final model in {final}")
        return final


def _train(config: JobConfig, options: TrainOptions, settings: LaunchSettings, archive: JobArchive,
           folders: ArchiveLayout, checkpoint: Path | None, plan: GpuLayout | None,
           metrics: TrainerMetrics | None) -> Any:
    from transformers import AutoTokenizer

    tasks = read_dataset(config.dataset)
    functions = load_reward_functions(config.rewards, sorted({key for row in tasks for key in row}))
    tokenizer = AutoTokenizer.from_pretrained(config.model)
    if tokenizer.pad_token is None:  # as TRL does
        tokenizer.pad_token = tokenizer.eos_token
    control = ControlClient(options.proxy_url, token=options.control_token)
    bars = TrainingBars()
    watched_archive, display = observed(archive, bars, metrics)
    collector = GroupCollector(
        control, rollout_runner(options, folders.outputs), settings,
        max_response_length=config.max_response_length, decoder=tokenizer,
    )
    timeline = StepTimeline(archive.write_timeline, running=running_calls(collector, control))
    progress, versions = StepProgress(watched_archive, display=display, timeline=timeline), PolicyVersions()
    callbacks: list[Any] = [TrainerPhases(timeline)]
    served = _served_weights(config, options, control, archive)
    if config.backend == Backend.HF:
        admin = PolicyAdmin(options.policy_urls[0], token=options.control_token)
        callbacks.append(HfWeightSync(admin, folders.weights, versions, served, report=archive.log,
                                      timing=progress.timing))
    reward_funcs, reward_weights = trl_reward_funcs(functions)
    with RewardScorer(functions, config.reward_timeout_s) as scorer:
        periodic = None
        if config.eval_every:  # after the sync, before the step's metrics line (its eval/... go on it)
            periodic = PeriodicEval(config, options, settings, progress, control, scorer,
                                    [f.name for f in functions], tokenizer, archive.log)
            callbacks.append(periodic)
        callbacks.append(StepMetricsCallback(progress))  # after the sync: see `ui.progress`
        rollouts = HarnessRollouts(
            tasks=tasks, collector=collector, scorer=scorer, archive=archive, progress=progress, versions=versions,
            masked=MaskedRow(pad_id=tokenizer.pad_token_id, eos_id=tokenizer.eos_token_id),
            max_parallel_rollouts=config.max_parallel_rollouts, served=served,
            max_staleness=config.max_staleness, max_steps=config.max_steps, mask_truncated=masks_truncated(config),
            hold_step_s=STRAGGLER_HOLD_TIMEOUTS * config.harness_timeout_s,
        )
        args = grpo_config_kwargs(config, output_dir=folders.checkpoints, reward_weights=reward_weights, plan=plan,
                                  policy_url=options.policy_urls[0])
        if plan is not None and plan.weight_sync == WeightSync.NCCL:
            # TRL's client joins vLLM's NCCL group at this address; in a container on an internal network
            # vLLM's own guess (a route to the internet) finds none.
            os.environ.setdefault("VLLM_HOST_IP", socket.gethostbyname(socket.gethostname()))
        trainer = build_trainer(config, args=args, tokenizer=tokenizer, dataset=trl_dataset(tasks),
                                rollout_func=rollouts, reward_funcs=reward_funcs, callbacks=callbacks)
        if periodic is not None:
            periodic.trainer = trainer
        if plan is None:
            seat_weight_sync(trainer, PushedAfterEachStep())  # TRL's off-policy correction, on the hf backend too
        sleeper = None
        if plan is not None:
            sleeper = _attach_vllm_sync(trainer, plan, options, folders, archive, progress)
            trl_internals.set_weight_sync(trainer, AnnouncedSync(
                trl_internals.weight_sync(trainer), trainer, served=served,
                announce=lambda step: announce_version(control, step)))
        if sleeper is not None and plan is not None and plan.sleep_mode:
            rollouts.after_rollouts = sleeper.sleep
        if config.max_staleness:
            _go_async(trainer, rollouts, plan, options, progress, len(tasks), sleeper)
        use_bars(trainer, bars)
        try:
            trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
        finally:  # also when interrupted: leave the terminal clean
            rollouts.stop_producer()
            bars.stop()
            if sleeper is not None:
                _wake_policy(sleeper, archive)
    return trainer


def _go_async(trainer: Any, rollouts: HarnessRollouts, plan: GpuLayout | None, options: TrainOptions,
              progress: StepProgress, n_tasks: int, filesystem: FilesystemSync | None) -> None:
    """max_staleness >= 1: groups run across steps (`rollouts.producer`), and a vLLM policy is paused,
    not drained, while its weights move and the version is announced (`weights.vllm_sync.PausedSync`)."""
    rollouts.group_size = trainer.num_generations
    rollouts.groups_per_step = trainer.args.generation_batch_size // trainer.num_generations
    rollouts.schedule = GroupSchedule(n_tasks, seed=trainer.args.seed)
    if plan is None:
        return
    if filesystem is not None:
        filesystem.paused = True
    servers = [VllmAdmin(url, timeout_s=options.weight_sync_timeout_s) for url in options.policy_urls]
    trl_internals.set_weight_sync(trainer, PausedSync(trl_internals.weight_sync(trainer), servers, trainer,
                                                      timing=progress.timing))


def _served_weights(config: JobConfig, options: TrainOptions, control: ControlClient,
                    archive: JobArchive) -> ServedWeights:
    """Which process serves each policy server, noted at each weight update and asked before scoring."""
    probes: list[ServerProbe]
    if config.backend == Backend.HF:
        probes = [PolicyAdmin(options.policy_urls[0], token=options.control_token)]
    else:
        probes = [VllmAdmin(url, timeout_s=options.weight_sync_timeout_s) for url in options.policy_urls]
    return ServedWeights(probes, control.replicas, report=archive.log)


def _plan(config: JobConfig) -> GpuLayout:
    """The plan `make train` made before the stack started (VERI_GPU_PLAN); a trainer run by hand, outside
    the stack, plans here (it then sees the whole machine)."""
    try:
        return plan_from_env() if os.environ.get(envs.VERI_GPU_PLAN) else plan_job(config)
    except LayoutError as error:
        raise JobError(str(error)) from error


def _attach_vllm_sync(trainer: Any, plan: GpuLayout, options: TrainOptions, folders: ArchiveLayout,
                      archive: JobArchive, progress: StepProgress) -> FilesystemSync | None:
    servers = [VllmAdmin(url, timeout_s=options.weight_sync_timeout_s) for url in options.policy_urls]
    release_held(servers, archive.log)  # a trainer that died mid-update may have left them paused
    if plan.weight_sync == WeightSync.NCCL:
        trl_internals.set_weight_sync(trainer, TimedSync(trl_internals.weight_sync(trainer), progress.timing,
                                                         timeout_s=options.weight_sync_timeout_s,
                                                         policy=", ".join(options.policy_urls)))
        return None
    sync = FilesystemSync(trainer, servers, folders.weights, report=archive.log, timing=progress.timing,
                          sleep_mode=plan.sleep_mode, figure=progress.figure)
    seat_weight_sync(trainer, sync)
    return sync


def _wake_policy(sync: FilesystemSync, archive: JobArchive) -> None:
    """Sleep mode: the job ends (or fails) with the servers awake, so a stack kept up serves again."""
    try:
        sync.wake()
    except HttpCallError as error:  # the job's own outcome matters more; say what is left to do
        archive.log(f"could not wake the policy server(s) at the end of the job ({error}); `make down && make up`"
                    " restarts them")


def _line_up(archive: JobArchive, folders: ArchiveLayout, resume: bool) -> Path | None:
    """The checkpoint to resume from (None: step 0); refuses to start over an existing job unasked."""
    if resume:
        return prepare_resume(archive, folders.checkpoints)
    done, checkpoint = archive.last_completed_step(), latest_checkpoint(folders.checkpoints)
    if done is not None or checkpoint is not None:
        raise JobError(f"job {archive.job_name} in {archive.dir} already ran (last archived step {done},"
                       f" checkpoint {checkpoint}): pass --resume to continue it, or --name for a new job")
    archive.discard_incomplete_steps()  # a first run stopped before its first step: set its rollouts aside
    return None


def _save_final(trainer: Any, folder: Path) -> Path:
    from veri.services.policy.weight_files import save_final_model

    return save_final_model(trainer.model, trainer.processing_class, folder)
