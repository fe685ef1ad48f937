"""Per-step metrics: computed from a step's rollout records, sent to TensorBoard and W&B when available.

`step_metrics` keys (all numbers; a key whose value would be undefined, e.g. a mean over nothing, is left out):

    rollouts, trainable, masked                     records in the step; used in the loss; not used
    reward/scored                                   rollouts with a reward (not None)
    reward/mean, reward/std, reward/min, reward/max over scored rollouts (std: population, ddof=0)
    reward_fn/<name>/mean                           each reward function's own values (None skipped)
    status/<completed|failed|truncated>             rollouts per harness status (zeros included)
    rule/<name>                                     rollouts where that rule fired, every Rule (zeros included)
    tokens/prompt, tokens/completion, tokens/environment
                                                    summed over every row of every rollout (completion = sampled tokens,
                                                    env_mask 1; environment = bridged turns, env_mask 0)
    tokens/trainable_completion                     sampled tokens of trainable rollouts (what the loss sees)
    tokens/completion_mean                          sampled tokens per row
    tokens/dropped_fraction                         sampled tokens not trained / all sampled (`core.token_account`)
    rows/per_rollout                                training rows per rollout (branches: sub-agents, side calls)
    turns/mean, turns/max                           spans (model calls) per rollout
    tool_calls/attempted                            tool calls the policy wrote, parsed or not
    tool_calls/parse_failed, .../parse_failed/<kind>
                                                    those the renderer could not parse (or naming no offered
                                                    tool), every ToolCallFailure kind (zeros included)
    tool_calls/parse_failure_rate                   parse_failed / attempted (left out when none was attempted)
    rollouts/with_parse_failures                    rollouts with at least one
    policy_version/min, /max, /distinct             over every span of the step
    replica/<i>/requests, replica/<i>/prefix_cache_hit_rate
                                                    per policy replica the proxy pinned rollouts to: model
                                                    calls it served, cached / prompt tokens (when reported)
    time/<name>_s                                   each timing given (rollout, reward, train, weight_sync)
    time/step_s                                     timings["step"] when given, else the sum of the others

Added by `ui.progress` from the step's timeline (`trainer.timeline`), not by `step_metrics`:
    utilisation/policy_<i>                          the fraction of the step's wall time replica i had a
                                                    request in flight (calls at once counted once)
    utilisation/trainer                             the fraction spent in forward/backward and the optimizer
Added by the weight sync (`trainer.weights.vllm_sync`), on a GPU with vllm_sleep_mode:
    policy/sleep_freed_gib                          GPU memory the policy's sleep gave back to the trainer
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from veri.core.episodes import RolloutStatus
from veri.core.records import ToolCallFailure
from veri.core.rollout_record import REWARD_FN_PREFIX, RolloutRecord
from veri.core.rules import Rule

Metrics = dict[str, float | int]


def _verifier_metrics(records: list[RolloutRecord]) -> Metrics:
    """A Harbor dataset's tests, whatever the job's reward functions: how many ran, how many could not
    (each also under rule/verifier_*), and the mean of their `reward` over those that gave one."""
    verifiers = [record.verifier for record in records if record.verifier is not None]
    if not verifiers:
        return {}
    rewards = [v.reward for v in verifiers if v.ran and v.reward is not None]
    metrics: Metrics = {"verifier/verified": sum(v.ran for v in verifiers),
                        "verifier/failed": sum(not v.ran for v in verifiers)}
    if rewards:
        metrics["verifier/reward/mean"] = statistics.fmean(rewards)
    return metrics


def step_metrics(records: list[RolloutRecord], timings: dict[str, float]) -> Metrics:
    metrics: Metrics = {"rollouts": len(records)}
    trainable = sum(record.trainable for record in records)
    metrics |= {"trainable": trainable, "masked": len(records) - trainable}

    rewards = [r.reward.reward for r in records if r.reward is not None and r.reward.reward is not None]
    metrics["reward/scored"] = len(rewards)
    if rewards:
        metrics |= {
            "reward/mean": statistics.fmean(rewards),
            "reward/std": statistics.pstdev(rewards),
            "reward/min": min(rewards),
            "reward/max": max(rewards),
        }
    per_function: dict[str, list[float]] = {}
    for record in records:
        for name, value in (record.reward.per_function if record.reward else {}).items():
            values = per_function.setdefault(name, [])
            if value is not None and math.isfinite(value):
                values.append(value)
    metrics |= {f"{REWARD_FN_PREFIX}{name}/mean": statistics.fmean(v) for name, v in per_function.items() if v}

    metrics |= _verifier_metrics(records)

    metrics |= {f"status/{status.value}": sum(r.status == status for r in records) for status in RolloutStatus}
    fired = [{verdict.rule for verdict in record.verdicts} for record in records]
    metrics |= {f"rule/{rule.value}": sum(rule in rules for rules in fired) for rule in Rule}

    rows = [row for record in records for row in record.episode.rows]
    sampled = [sum(row.env_mask) for row in rows]
    metrics |= {
        "tokens/prompt": sum(len(row.prompt_ids) for row in rows),
        "tokens/completion": sum(sampled),
        "tokens/environment": sum(len(row.env_mask) for row in rows) - sum(sampled),
        "tokens/trainable_completion": sum(
            sum(row.env_mask) for record in records if record.trainable for row in record.episode.rows
        ),
    }
    if rows:
        metrics["tokens/completion_mean"] = statistics.fmean(sampled)
    accounts = [record.tokens for record in records]
    if all_sampled := sum(account.sampled for account in accounts):
        metrics["tokens/dropped_fraction"] = sum(account.dropped_total for account in accounts) / all_sampled
    if records:
        metrics["rows/per_rollout"] = statistics.fmean(len(record.episode.rows) for record in records)

    turns = [len(record.spans) for record in records]
    if turns:
        metrics |= {"turns/mean": statistics.fmean(turns), "turns/max": max(turns)}
    versions = {span.policy_version for record in records for span in record.spans}
    if versions:
        metrics |= {
            "policy_version/min": min(versions),
            "policy_version/max": max(versions),
            "policy_version/distinct": len(versions),
        }

    metrics |= _tool_call_metrics(records)
    metrics |= _replica_metrics([span for record in records for span in record.spans])
    metrics |= {f"time/{name}_s": float(seconds) for name, seconds in timings.items() if name != "step"}
    metrics["time/step_s"] = float(timings["step"]) if "step" in timings else float(sum(timings.values()))
    return metrics


def _tool_call_metrics(records: list[RolloutRecord]) -> Metrics:
    """A job has one harness, so these are that harness's: a policy whose tool calls degrade shows here
    (the rate climbs) before its reward falls."""
    per_rollout = [record.tool_call_failures for record in records]
    failed = sum(sum(counts.values()) for counts in per_rollout)
    attempted = sum(record.tool_calls_attempted for record in records)
    metrics: Metrics = {"tool_calls/attempted": attempted, "tool_calls/parse_failed": failed}
    metrics |= {f"tool_calls/parse_failed/{kind.value}": sum(counts.get(kind.value, 0) for counts in per_rollout)
                for kind in ToolCallFailure}
    if attempted:
        metrics["tool_calls/parse_failure_rate"] = failed / attempted
    metrics["rollouts/with_parse_failures"] = sum(bool(counts) for counts in per_rollout)
    return metrics


def _replica_metrics(spans: list[Any]) -> Metrics:
    metrics: Metrics = {}
    for replica in sorted({span.replica for span in spans if span.replica is not None}):
        served = [span for span in spans if span.replica == replica]
        metrics[f"replica/{replica}/requests"] = len(served)
        reported = [span for span in served if span.cached_prompt_tokens is not None]
        prompt = sum(len(span.prompt_token_ids or ()) for span in reported)
        if prompt:
            metrics[f"replica/{replica}/prefix_cache_hit_rate"] = sum(s.cached_prompt_tokens for s in reported) / prompt
    return metrics


class MetricSinks:
    """TensorBoard and W&B, each optional: a missing package or a failing sink is reported once, then skipped.

    `report` receives one line per event (the archive logs it to logs/train.log).
    """

    def __init__(self, archive_dir: Path, job_name: str, report: Callable[[str], None]) -> None:
        self._dir = archive_dir
        self._job_name = job_name
        self._report = report
        self._tensorboard: Any = None
        self._tensorboard_off = False
        self._wandb_run: Any = None
        self._wandb_off = not os.environ.get("WANDB_API_KEY")

    def write(self, step: int, metrics: Metrics) -> None:
        self._write_tensorboard(step, metrics)
        self._write_wandb(step, metrics)

    def close(self) -> None:
        closers = [sink.close for sink in (self._tensorboard,) if sink is not None]
        closers += [run.finish for run in (self._wandb_run,) if run is not None]
        for close in closers:
            try:
                close()
            except Exception as error:  # noqa: BLE001 - closing a sink must never fail the job
                self._report(f"metrics sink {close.__qualname__}() failed: {error!r}")
        self._tensorboard = self._wandb_run = None

    def _write_tensorboard(self, step: int, metrics: Metrics) -> None:
        if self._tensorboard_off:
            return
        try:
            if self._tensorboard is None:
                self._tensorboard = self._open_tensorboard(step)
            for key, value in metrics.items():
                self._tensorboard.add_scalar(key, value, step)
            self._tensorboard.flush()
        except Exception as error:  # noqa: BLE001 - TensorBoard is optional; metrics.jsonl is the record
            self._tensorboard_off = True
            self._report(f"TensorBoard disabled after an error (metrics.jsonl still has every step): {error!r}")

    def _open_tensorboard(self, step: int) -> Any:
        from torch.utils.tensorboard import SummaryWriter  # lazy: a slow import

        folder = self._dir / "tensorboard"
        resumed = folder.is_dir() and any(folder.glob("events.out.tfevents.*"))
        # On resume, hide events a crashed run logged at this step or later (they are re-run).
        return SummaryWriter(log_dir=str(folder), purge_step=step if resumed else None)

    def _write_wandb(self, step: int, metrics: Metrics) -> None:
        if self._wandb_off:
            return
        try:
            if self._wandb_run is None:
                self._wandb_run = self._open_wandb()
                if self._wandb_run is None:
                    return
            self._wandb_run.log(dict(metrics), step=step)
        except Exception as error:  # noqa: BLE001 - W&B is optional
            self._wandb_off = True
            self._report(f"W&B disabled after an error (metrics.jsonl still has every step): {error!r}")

    def _open_wandb(self) -> Any:
        try:
            import wandb
        except ImportError:
            self._wandb_off = True
            self._report("WANDB_API_KEY is set but wandb is not installed (pip install wandb): W&B skipped")
            return None
        id_file = self._dir / "wandb-run-id"
        run_id = id_file.read_text().strip() if id_file.is_file() else None
        if not run_id:
            run_id = wandb.util.generate_id() if hasattr(wandb, "util") else os.urandom(4).hex()
            id_file.write_text(run_id + "\n")
        run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "veri"),
            name=self._job_name,
            id=run_id,
            resume="allow",
            dir=str(self._dir),
        )
        self._report(f"W&B run {run_id} (project {os.environ.get('WANDB_PROJECT', 'veri')})")
        return run
