"""The GPU path without a GPU: the GRPOConfig a vLLM job gets (TRL server mode), and the version the
rollout function announces to the proxy for a backend that reports none (the vLLM stand-in)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import yaml
from transformers import AutoTokenizer

from tests.servers import free_port, start_server
from tests.trainer.conftest import MAX_TOKENS, build_rollouts, write_job
from veri.core.config import JobConfig, parse_config
from veri.core.layout import GpuInventory
from veri.core.validation import load_config
from veri.rewards import RewardFunction, RewardScorer, load_reward_functions
from veri.trainer.archive import JobArchive
from veri.trainer.grpo.rewards import trl_reward_funcs
from veri.trainer.grpo.setup import build_trainer, grpo_config_kwargs, lora_config, seat_weight_sync
from veri.trainer.rollouts.tasks import task_key, trl_dataset

VLLM_JOB = {"backend": "vllm", "max_steps": 7, "rollouts_per_prompt": 4, "lora_rank": 8,
            "sampling": {"temperature": 0.7, "top_p": 1.0}, "grpo": {"per_device_train_batch_size": 8}}


def test_vllm_job_uses_trl_server_mode_against_the_policy(tiny_model, tmp_path):
    from trl import GRPOConfig

    config = vllm_job(tiny_model, tmp_path)
    plan = config.gpu_layout(GpuInventory.nvidia(4))
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
    plan = config.gpu_layout()
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
    the importance-sampling ratio from the rollouts' logprobs (what TRL gates on `use_vllm`)."""
    from transformers import AutoTokenizer

    config = vllm_job(tiny_model, tmp_path).model_copy(update={"device": "cpu"})
    funcs, weights = trl_reward_funcs([RewardFunction.wrap("reward", lambda **kw: None)])
    kwargs = grpo_config_kwargs(config, output_dir=tmp_path / "ckpt", policy_url="http://policy:8001",
                                reward_weights=weights, plan=config.gpu_layout())
    rows = kwargs["per_device_train_batch_size"]  # one generation batch: 2 groups of 4
    prompt, completion = [5, 6, 7, 8], [9, 10, 11]

    def rollout_func(prompts, trainer):
        return {"prompt_ids": [prompt] * rows, "completion_ids": [completion] * rows,
                "logprobs": [[-1.0] * len(completion)] * rows, "env_mask": [[1] * len(completion)] * rows,
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
    assert batch["importance_sampling_ratio"].shape == (rows, len(completion))
    trainer._generate_and_score_completions(inputs)
    assert sync.calls == 1  # the same step (gradient accumulation): the weights are already there
    trainer.state.global_step = 1
    trainer._generate_and_score_completions(inputs)
    assert sync.calls == 2  # the next step's rollouts start from its weights


def vllm_job(model: Path, folder: Path) -> JobConfig:
    """The vLLM job, parsed without the GPU-layout check (this machine has no GPU)."""
    return parse_config(yaml.safe_load(write_job(folder, model, **VLLM_JOB).read_text()), base_dir=folder)


def test_rollouts_announce_the_step_as_policy_version(tiny_model, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    reply = tokenizer.encode("hi", add_special_tokens=False) + [tokenizer.eos_token_id]
    port = free_port()
    standin = subprocess.Popen([sys.executable, str(Path(__file__).parents[1] / "vllm_standin.py"),
                                "--port", str(port), "--reply-ids", json.dumps(reply), "--no-version"])
    try:
        proxy_args = ["serve", "proxy", "--policy-url", f"http://127.0.0.1:{port}", "--model", str(tiny_model),
                      "--store", str(tmp_path / "spans"), "--max-tokens", str(MAX_TOKENS)]
        with start_server(proxy_args) as proxy:
            config = load_config(write_job(tmp_path / "job", tiny_model), base_dir=tmp_path / "job")
            trainer = SimpleNamespace(state=SimpleNamespace(global_step=5), num_generations=2)
            with (JobArchive(tmp_path / "archive", "job") as archive,
                  RewardScorer(load_reward_functions(config.rewards), 30) as scorer):
                rollouts = build_rollouts(config, proxy.url, tokenizer, archive, scorer, tmp_path / "out",
                                          announce=True)
                rollouts([task_key(0), task_key(0)], trainer)
                records = [archive.read_rollout(row["path"]) for row in archive.rollouts(step=5)]
    finally:
        standin.terminate()
        standin.wait()
    versions = {span.policy_version for record in records for span in record.spans}
    assert len(records) == 2 and versions == {5}


def test_the_gpu_pins_agree_with_trl():
    from importlib.metadata import requires, version

    from packaging.requirements import Requirement

    from veri.trainer.gpu_stack import GPU_PINS, gpu_stack_problems

    assert version("trl") == GPU_PINS["trl"] and version("torch").split("+")[0] == GPU_PINS["torch"]
    [window] = [Requirement(r) for r in requires("trl") if r.startswith("vllm") and 'extra == "vllm"' in r]
    assert window.specifier.contains(GPU_PINS["vllm"])  # inside TRL's supported vLLM window
    problems = gpu_stack_problems()  # this CPU box: no vLLM, the CPU stack's transformers
    assert any(p.startswith("vllm is not installed: pip install vllm==0.31.0") for p in problems)
