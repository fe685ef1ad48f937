"""The GPU path without a GPU: the GRPOConfig a vLLM job gets (TRL server mode), the ratio TRL weighs each
token by, and the version the weight sync announces to the proxy for a backend that reports none (the vLLM
stand-in)."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from transformers import AutoTokenizer

from testkit.servers import free_port, start_server
from testkit.trainer_jobs import MAX_TOKENS, write_job
from tests.trainer.conftest import build_rollouts
from tests.trainer.records import model_logprobs
from veri.archive import JobArchive
from veri.core.config import JobConfig, parse_config
from veri.gpu.job import plan_job
from veri.gpu.planner import GpuInventory
from veri.loop.rewards import RewardFunction, RewardScorer, load_reward_functions
from veri.services.policy.vllm.admin_client import VllmAdmin
from veri.services.proxy.control_client import ControlClient
from veri.services.trainer.grpo.rewards import trl_reward_funcs
from veri.services.trainer.grpo.setup import build_trainer, grpo_config_kwargs, lora_config, seat_weight_sync
from veri.services.trainer.periodic_eval import sync_now
from veri.services.trainer.schedule.tasks import task_key, trl_dataset
from veri.services.trainer.weights.served import ServedWeights
from veri.services.trainer.weights.sync import announce_version
from veri.services.trainer.weights.vllm_sync import AnnouncedSync
from veri.validation.run import load_config

VLLM_JOB = {"backend": "vllm", "max_steps": 7, "rollouts_per_prompt": 4, "lora_rank": 8,
            "sampling": {"temperature": 0.7, "top_p": 1.0}, "grpo": {"per_device_train_batch_size": 8}}


def test_vllm_job_uses_trl_server_mode_against_the_policy(tiny_model, tmp_path):
    from trl import GRPOConfig

    config = vllm_job(tiny_model, tmp_path)
    plan = plan_job(config, GpuInventory.nvidia(4))
    kwargs = grpo_config_kwargs(config, output_dir=tmp_path / "ckpt", policy_url="http://policy:8001",
                                reward_weights=[1.0], plan=plan)
    assert kwargs["use_vllm"] is True and kwargs["vllm_mode"] == "server"
    assert kwargs["vllm_server_base_url"] == "http://policy:8001"
    assert 1024 <= kwargs["vllm_group_port"] < 65536  # a free port of this host, per job
    assert (kwargs["num_generations"], kwargs["max_steps"], kwargs["temperature"], kwargs["top_p"]) == (4, 7, 0.7, 1.0)
    assert kwargs["reward_weights"] == [1.0] and kwargs["output_dir"] == str(tmp_path / "ckpt")
    args = GRPOConfig(**{**kwargs, "use_cpu": True})  # TRL accepts it (bf16 needs the GPU box)
    assert args.use_vllm and args.vllm_mode == "server" and args.vllm_server_base_url == "http://policy:8001"
    lora = lora_config(config)
    assert lora.r == 8 and lora.lora_alpha == 16 and lora.target_modules == "all-linear"


def test_filesystem_sync_builds_trl_without_its_nccl_client(tiny_model, tmp_path):
    """One GPU or the CPU twin: TRL gets no client of its own (it would open an NCCL group); veri's
    filesystem sync takes its seat, with TRL's server-mode steps (the sync, the IS correction) on."""
    config = vllm_job(tiny_model, tmp_path).model_copy(update={"device": "cpu"})
    plan = plan_job(config)
    kwargs = grpo_config_kwargs(config, output_dir=tmp_path / "ckpt", policy_url="http://policy:8001",
                                reward_weights=[1.0], plan=plan)
    assert plan.weight_sync == "filesystem"
    assert kwargs["use_vllm"] is False and "vllm_server_base_url" not in kwargs
    assert kwargs["use_cpu"] is True and kwargs["bf16"] is False  # float32, as the CPU twin serves


class CountedSync:
    """What `FilesystemSync` is to TRL here: a seat whose `sync_weights` TRL calls (counted)."""

    def __init__(self) -> None:
        self.calls = 0

    def sync_weights(self) -> None:
        self.calls += 1


def test_trl_calls_the_seated_sync_once_per_step_and_runs_the_correction(tiny_model, tmp_path):
    """The seat, in the TRL this job runs: the trainer built from the filesystem-sync job's own GRPOConfig
    (no TRL client) syncs through the seated sync before a step's rollouts, once per step, and computes
    the importance-sampling ratio from the rollouts' logprobs (what TRL gates on `use_vllm`): trainer over
sampler probability per token, truncated at `importance_sampling_cap`."""
    from transformers import AutoTokenizer

    config = vllm_job(tiny_model, tmp_path).model_copy(update={"device": "cpu"})
    funcs, weights = trl_reward_funcs([RewardFunction.wrap("reward", lambda **kw: None)])
    kwargs = grpo_config_kwargs(config, output_dir=tmp_path / "ckpt", policy_url="http://policy:8001",
                                reward_weights=weights, plan=plan_job(config))
    rows = kwargs["per_device_train_batch_size"]  # one generation batch: 2 groups of 4
    prompt, completion = [5, 6, 7, 8], [9, 10, 11]
    # The sampler's logprobs: the model's own, less these (ratios e^0.4, e^-0.3, e^2: the last over the cap).
    off_policy = [0.4, -0.3, 2.0]
    cap = kwargs["vllm_importance_sampling_clip_max"]
    assert math.exp(max(off_policy)) > cap > math.exp(0.4)
    sampled = [own - off for own, off in zip(model_logprobs(tiny_model, prompt, completion, kwargs["temperature"]),
                                                          off_policy, strict=True)]

    def rollout_func(prompts, trainer):
        return {"prompt_ids": [prompt] * rows, "completion_ids": [completion] * rows,
                "logprobs": [sampled] * rows, "env_mask": [[1] * len(completion)] * rows,
                "veri_rewards": [{"reward": float(i % 2)} for i in range(rows)]}

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    trainer = build_trainer(config, args=kwargs, tokenizer=tokenizer, dataset=trl_dataset([{}]),
                            rollout_func=rollout_func, reward_funcs=funcs, callbacks=[])
    assert not trainer.use_vllm  # built without TRL's client: nothing would sync or correct unseated
    sync = CountedSync()
    seat_weight_sync(trainer, sync)
    trainer.model.train()
    inputs = [{"prompt": task_key(0)}] * rows

    batch = trainer._generate_and_score_completions(inputs)
    assert sync.calls == 1  # before step 0's rollouts
    # The ratio TRL weighs each token's loss by: trainer / sampler probability, truncated at the job's cap.
    expected = torch.tensor([[math.exp(0.4), math.exp(-0.3), cap]] * rows)
    torch.testing.assert_close(batch["importance_sampling_ratio"], expected, atol=1e-4, rtol=1e-4)
    trainer._generate_and_score_completions(inputs)
    assert sync.calls == 1  # the same step (gradient accumulation): the weights are already there
    trainer.state.global_step = 1
    trainer._generate_and_score_completions(inputs)
    assert sync.calls == 2  # the next step's rollouts start from its weights


def vllm_job(model: Path, folder: Path) -> JobConfig:
    """The vLLM job, parsed without the GPU-layout check (this machine has no GPU)."""
    return parse_config(yaml.safe_load(write_job(folder, model, **VLLM_JOB).read_text()), base_dir=folder)


@pytest.mark.needs("process")
def test_the_sync_announces_the_version_for_a_steps_rollouts_and_for_an_eval_after_the_step(tiny_model, tmp_path):
    """vLLM reports no version: the proxy stamps each span with the one the trainer announced. The sync
    announces it as it loads the weights (`vllm_sync.AnnouncedSync`): TRL's before a step's rollouts, and
    `eval_every`'s after a step (`periodic_eval.sync_now`), whose rollouts carried the previous step's
    version while the announcement was the rollout function's."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    reply = tokenizer.encode("hi", add_special_tokens=False) + [tokenizer.eos_token_id]
    port = free_port()
    standin = subprocess.Popen([sys.executable, str(Path(__file__).parents[1] / "vllm_standin.py"),
                                "--port", str(port), "--reply-ids", json.dumps(reply), "--no-version"])
    policy_url = f"http://127.0.0.1:{port}"
    try:
        proxy_args = ["serve", "proxy", "--policy-url", policy_url, "--model", str(tiny_model),
                      "--store", str(tmp_path / "spans"), "--max-tokens", str(MAX_TOKENS)]
        with start_server(proxy_args) as proxy:
            control = ControlClient(proxy.url)
            served = ServedWeights([VllmAdmin(policy_url, timeout_s=30)], control.replicas, report=print)
            config = load_config(write_job(tmp_path / "job", tiny_model), base_dir=tmp_path / "job")
            trainer = SimpleNamespace(state=SimpleNamespace(global_step=4), num_generations=2, _last_loaded_step=3)
            inner = CountedSync()
            trainer.vllm_generation = AnnouncedSync(inner, trainer, served=served,
                                                    announce=lambda step: announce_version(control, step))
            with (JobArchive(tmp_path / "archive", "job") as archive,
                  RewardScorer(load_reward_functions(config.rewards), 30) as scorer):
                rollouts = build_rollouts(config, proxy.url, tokenizer, archive, scorer, tmp_path / "out",
                                          served=served)
                sync_now(trainer)  # TRL's sync before step 4's rollouts does the same
                rollouts([task_key(0), task_key(0)], trainer)
                records = [archive.read_rollout(row["path"]) for row in archive.rollouts(step=4)]
                trainer.state.global_step = 5  # step 4 trained; eval_every syncs its weights and evaluates them
                sync_now(trainer)
                evaluated = asyncio.run(rollouts.collector.collect(step=0, task_index=0, task=rollouts.tasks[0],
                                                                   size=2))
                sync_now(trainer)  # TRL's own sync before step 5's rollouts: the weights are there already
    finally:
        standin.terminate()
        standin.wait()
    assert inner.calls == 2 and trainer._last_loaded_step == 5
    assert len(records) == 2 and {span.policy_version for record in records for span in record.spans} == {4}
    assert all(not record.verdicts for record in records)  # the same server process throughout
    assert {span.policy_version for rollout in evaluated for span in rollout.record.spans} == {5}


def test_the_gpu_pins_agree_with_trl():
    from importlib.metadata import requires, version

    from packaging.requirements import Requirement

    from veri.services.trainer.gpu_stack import GPU_PINS, gpu_stack_problems

    assert version("trl") == GPU_PINS["trl"] and version("torch").split("+")[0] == GPU_PINS["torch"]
    [window] = [Requirement(r) for r in requires("trl") if r.startswith("vllm") and 'extra == "vllm"' in r]
    assert window.specifier.contains(GPU_PINS["vllm"])  # inside TRL's supported vLLM window
    problems = gpu_stack_problems()  # this CPU box: no vLLM, the CPU stack's transformers
    assert any(p.startswith("vllm is not installed: pip install vllm==0.31.0") for p in problems)
